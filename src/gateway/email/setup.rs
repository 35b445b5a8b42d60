//! Putting the email transport together: the settings resolved, the skills its routes name
//! checked, the relay and the STARTTLS certificate read (every mistake at once); then, when the
//! server starts, the queue made and the SMTP port bound. The IMAP folder is first read when
//! the server starts.

use std::sync::Arc;

use crate::config::ConfigErrors;
use crate::config::email::{EmailConfig, EmailSettings};
use crate::config::env::Vars;
use crate::config::routes::check_skills;
use crate::gateway::Gateway;
use crate::gateway::email::intake::Intake;
use crate::gateway::email::reply::Mailer;
use crate::gateway::email::{Email, worker};
use crate::skills::index::SearchIndex;

/// The email settings resolved, with what they need read: `None` without `email.smtp.bind`
/// or `email.imap`.
pub struct Resolved {
    config: EmailConfig,
    mailer: Mailer,
    tls: Option<Arc<super::tls::LiveCert>>,
}

/// The project's email settings resolved and checked; every mistake at once.
pub fn resolve(
    index: &SearchIndex,
    settings: EmailSettings,
    vars: &Vars,
) -> Result<Option<Resolved>, ConfigErrors> {
    let mut errors = ConfigErrors::default();
    let named = settings.named_skills();
    let config = match EmailConfig::resolve(settings, &|name| vars.get(name)) {
        Ok(Some(config)) => config,
        Ok(None) => return Ok(None),
        Err(more) => {
            check_skills(named, index, &mut errors);
            errors.extend(more);
            return Err(errors);
        }
    };
    check_skills(named, index, &mut errors);
    let mailer = Mailer::new(config.relay.as_deref(), &config.from)
        .map_err(|e| errors.at("email.relay", e))
        .ok();
    let tls = config.tls.as_ref().and_then(|settings| {
        super::tls::LiveCert::read(settings)
            .map_err(|more| errors.extend(more))
            .ok()
    });
    match mailer {
        Some(mailer) if errors.is_empty() => Ok(Some(Resolved {
            config,
            mailer,
            tls,
        })),
        _ => Err(errors),
    }
}

/// The email door: its queue made and its SMTP port bound.
pub async fn open(gateway: &Gateway, resolved: Resolved) -> Result<Arc<Email>, String> {
    let Resolved {
        config,
        mailer,
        tls,
    } = resolved;
    crate::gateway::queue::prepare(gateway, &worker::lane())
        .await
        .map_err(|e| format!("email: the mail queue could not be made: {e}"))?;
    let (listener, addr) = match config.bind {
        None => (None, None),
        Some(bind) => {
            let listener = tokio::net::TcpListener::bind(bind)
                .await
                .map_err(|e| format!("email.smtp.bind: cannot listen on {bind}: {e}"))?;
            let addr = listener.local_addr().unwrap_or(bind);
            (Some(listener), Some(addr))
        }
    };
    let config = Arc::new(config);
    Ok(Arc::new(Email {
        intake: Arc::new(Intake::new(gateway.clone(), config.clone())),
        mailer,
        tls: tls.as_ref().map(super::tls::LiveCert::acceptor),
        cert: tls,
        addr,
        listener: parking_lot::Mutex::new(listener),
        config,
    }))
}
