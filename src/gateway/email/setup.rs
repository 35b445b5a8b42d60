//! Putting the email transport together when the server starts: the settings resolved, the
//! skills its routes name checked, the relay prepared, the queue made, the SMTP port bound.
//! The IMAP folder is first read when the server starts.

use std::sync::Arc;

use crate::config::email::{EmailConfig, EmailSettings};
use crate::gateway::Gateway;
use crate::gateway::email::intake::Intake;
use crate::gateway::email::reply::Mailer;
use crate::gateway::email::{Email, worker};
use crate::skills::index::SearchIndex;

/// The email transport of this project (`None` without `email.smtp.bind` or `email.imap`), or
/// every mistake.
pub async fn configure(
    gateway: &Gateway,
    index: &SearchIndex,
    settings: EmailSettings,
) -> Result<Option<Arc<Email>>, Vec<String>> {
    let env = |name: &str| std::env::var(name).ok();
    let Some(config) = EmailConfig::resolve(settings, &env)? else {
        return Ok(None);
    };
    let mut errors = Vec::new();
    for (at, skill) in config.named_skills() {
        if index.get(&skill).is_none() {
            errors.push(format!("{at}: no skill is named `{skill}`"));
        }
    }
    let mailer = match Mailer::new(config.relay.as_deref(), &config.from) {
        Ok(mailer) => Some(mailer),
        Err(err) => {
            errors.push(err);
            None
        }
    };
    let tls = config.tls.as_ref().and_then(|settings| {
        super::tls::acceptor(settings)
            .map_err(|e| errors.push(e))
            .ok()
    });
    if !errors.is_empty() {
        return Err(errors);
    }
    worker::prepare(gateway)
        .await
        .map_err(|e| vec![format!("email: the mail queue could not be made: {e}")])?;
    let (listener, addr) = match config.bind {
        None => (None, None),
        Some(bind) => {
            let listener = tokio::net::TcpListener::bind(bind)
                .await
                .map_err(|e| vec![format!("email.smtp.bind: cannot listen on {bind}: {e}")])?;
            let addr = listener.local_addr().unwrap_or(bind);
            (Some(listener), Some(addr))
        }
    };
    let config = Arc::new(config);
    Ok(Some(Arc::new(Email {
        intake: Arc::new(Intake::new(gateway.clone(), config.clone())),
        mailer: mailer.expect("checked"),
        tls,
        addr,
        listener: parking_lot::Mutex::new(listener),
        config,
    })))
}
