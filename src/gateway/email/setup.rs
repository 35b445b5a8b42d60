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

/// The email settings a reload gives the running door ([`super::intake::Intake::reroute`]):
/// resolved, and the skills their routes name checked against the current ones. `None` when
/// email is no longer configured.
pub fn resolve_routes(
    index: &SearchIndex,
    settings: EmailSettings,
    vars: &Vars,
) -> Result<Option<EmailConfig>, ConfigErrors> {
    let mut errors = ConfigErrors::default();
    let named = settings.named_skills();
    let resolved = EmailConfig::resolve(settings, &|name| vars.get(name));
    check_skills(named, index, &mut errors);
    match resolved {
        Ok(config) if errors.is_empty() => Ok(config),
        Ok(_) => Err(errors),
        Err(more) => {
            errors.extend(more);
            Err(errors)
        }
    }
}

/// The settings of `next` that differ from `running` and only a restart applies (the listener,
/// the IMAP folder, the relay and what the worker and the mailer were made with); `next` keeps
/// `running`'s `from`, which the mailer answers from.
pub fn keep_restart_settings(running: &EmailConfig, next: &mut EmailConfig) -> Vec<&'static str> {
    let fields = |c: &EmailConfig| {
        [
            ("email.from", c.from.clone()),
            ("email.smtp.bind", format!("{:?}", c.bind)),
            ("email.smtp.hostname", c.hostname.clone()),
            ("email.smtp.tls", format!("{:?}", c.tls)),
            ("email.smtp.require-tls", c.require_tls.to_string()),
            ("email.max-size", c.max_size.to_string()),
            ("email.smtp.max-connections", c.max_connections.to_string()),
            (
                "email.smtp.max-data-in-flight",
                c.max_data_in_flight.to_string(),
            ),
            ("email.smtp.max-data-wait", format!("{:?}", c.max_data_wait)),
            ("email.smtp.max-data-rate", c.max_data_rate.to_string()),
            ("email.imap", format!("{:?}", c.imap)),
            ("email.relay", format!("{:?}", c.relay)),
            ("email.reply-window", format!("{:?}", c.reply_window)),
            ("email.trusted-relay", format!("{:?}", c.trusted_relay)),
            ("email.dns-resolver", format!("{:?}", c.dns_resolver)),
        ]
    };
    let changed = fields(running)
        .into_iter()
        .zip(fields(next))
        .filter(|((_, a), (_, b))| a != b)
        .map(|((name, _), _)| name)
        .collect();
    next.from = running.from.clone();
    changed
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
