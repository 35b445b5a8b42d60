//! Taking a mail in: read it (see `parse`), drop what is not for us (a sender not allowed, a
//! mail no route takes), claim its Message-ID once across replicas, and queue it durably on
//! [`TOPIC`] for the worker. The SMTP listener answers 250 only after this returns `Ok`.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::config::email::{EmailConfig, Target};
use crate::events::{Event, KernelBus};
use crate::gateway::Gateway;
use crate::gateway::email::parse::{Caps, Mail, MailError, read};
use crate::gateway::email::verify::{Client, Verifier};
use crate::gateway::queue::{Enqueued, Routed, encode, enqueue_once};

/// Where accepted mail queues (reserved: only the intake emits there).
pub const TOPIC: &str = "gateway-email";
/// The queue the worker claims from.
pub const QUEUE: &str = "run";

/// A mail as the intake queues it on [`TOPIC`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Queued {
    /// The parsed mail (see [`Mail::to_json`]).
    pub mail: Value,
    /// Why the mail must get no answer (RFC 3834), if it must not.
    pub no_reply: Option<String>,
    #[serde(flatten)]
    pub routed: Routed,
    /// Whether the sender was verified (DKIM and DMARC, or a trusted relay), and how.
    pub verified: bool,
    pub verification: String,
    pub envelope_from: Value,
    pub recipients: Value,
    pub received_at: u64,
}

impl crate::gateway::queue::Job for Queued {
    const VERSION: u64 = 1;
}
/// How long a Message-ID is remembered.
const DEDUPE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// What happened to a mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Queued under this event id.
    Queued(String),
    /// The same Message-ID came before.
    Duplicate,
    /// Accepted and dropped, why (not said to the sender).
    Dropped(&'static str),
}

/// Why a mail was not taken.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// The mail itself: the sender should not try again.
    #[error(transparent)]
    Mail(#[from] MailError),
    /// The store: try again later.
    #[error("{0}")]
    Store(String),
}

pub struct Intake {
    gateway: Gateway,
    /// Its routes, `default`, `allowed-senders` and `require-verified-sender` follow a reload
    /// ([`Intake::reroute`]).
    config: ArcSwap<EmailConfig>,
    caps: Caps,
    verifier: Verifier,
}

impl Intake {
    pub fn new(gateway: Gateway, config: Arc<EmailConfig>) -> Intake {
        let verifier = Verifier::new(
            config.dns_resolver,
            config.trusted_relay.clone(),
            &config.hostname,
        );
        Intake {
            gateway,
            config: ArcSwap::new(config),
            caps: Caps::default(),
            verifier,
        }
    }

    /// Routes mail with `config` from now on (a reload): its routes, `default`,
    /// `allowed-senders`, `require-verified-sender` and `from`. Mail being taken finishes with
    /// the routes it started with.
    pub fn reroute(&self, config: EmailConfig) {
        self.config.store(Arc::new(config));
    }

    /// Takes `raw`, sent by `client` with envelope sender `envelope_from` to `recipients`.
    pub async fn accept(
        &self,
        raw: &[u8],
        envelope_from: &str,
        recipients: &[String],
        client: &Client,
    ) -> Result<Taken, IntakeError> {
        let config = self.config.load_full();
        let ours = [config.from.clone()];
        let mail = read(raw, envelope_from, &ours, &self.caps)?;
        if let Some(allowed) = &config.allowed
            && !allowed.is_match(&mail.from)
        {
            tracing::info!(from = mail.from, "mail from a sender not allowed; dropped");
            return Ok(Taken::Dropped("sender not allowed"));
        }
        let verdict = self
            .verifier
            .check(raw, &mail.from, envelope_from, client)
            .await;
        let verified = verdict.verified();
        if !verified && config.require_verified_sender {
            tracing::info!(
                from = mail.from,
                verdict = verdict.describe(),
                "mail from a sender not verified; dropped"
            );
            return Ok(Taken::Dropped("sender not verified"));
        }
        let Some((skill, args, named, refused)) = route(&config, &mail, recipients, verified)
        else {
            tracing::info!(
                from = mail.from,
                subject = mail.subject,
                "no route takes this mail; dropped"
            );
            return Ok(Taken::Dropped("no route"));
        };
        let id = match &mail.message_id {
            Some(id) => id.clone(),
            None => crate::digest::sha256_hex(raw),
        };
        let mut event = Event::new(TOPIC, "mail");
        event.source = Some("email".into());
        event.data = Some(encode(&Queued {
            mail: mail.to_json(),
            no_reply: mail.no_reply.map(str::to_string),
            routed: Routed {
                skill,
                args,
                named,
                refused,
            },
            verified,
            verification: verdict.describe(),
            envelope_from: json!(envelope_from),
            recipients: json!(recipients),
            received_at: crate::context::id::now_ms(),
        }));
        let key = format!("email-message:{id}");
        let bus = self.gateway.kernel.bus();
        let enqueued = enqueue_once(bus, &key, "-", DEDUPE_WINDOW, &event, "{}")
            .await
            .map_err(IntakeError::Store)?;
        if enqueued != Enqueued::Queued {
            return Ok(Taken::Duplicate);
        }
        Ok(Taken::Queued(event.id))
    }
}

/// The first route that takes `mail`, else the default: the skill, its args, and whether the
/// mail named it (a command route), and whether the route's `skills` leave that name out. A
/// command route takes only mail whose sender is `verified`.
fn route(
    config: &EmailConfig,
    mail: &Mail,
    recipients: &[String],
    verified: bool,
) -> Option<(String, Value, bool, bool)> {
    let to: Vec<String> = recipients
        .iter()
        .map(|r| r.to_ascii_lowercase())
        .chain(mail.to.iter().cloned())
        .collect();
    for route in &config.routes {
        if route.from.as_ref().is_some_and(|g| !g.is_match(&mail.from)) {
            continue;
        }
        if route
            .to
            .as_ref()
            .is_some_and(|g| !to.iter().any(|t| g.is_match(t)))
        {
            continue;
        }
        let mut args = Map::new();
        args.insert("subject".into(), Value::from(mail.subject.as_str()));
        args.insert("text".into(), Value::from(mail.text.as_str()));
        if let Some(pattern) = &route.subject {
            let Some(found) = pattern.captures(&mail.subject) else {
                continue;
            };
            for name in pattern.capture_names().flatten() {
                if let Some(m) = found.name(name) {
                    args.insert(name.to_string(), Value::from(m.as_str()));
                }
            }
        }
        return Some(match &route.target {
            Target::Skill(skill) => (skill.clone(), Value::Object(args), false, false),
            Target::Command { .. } if !verified => continue,
            Target::Command { skills } => {
                let subject = mail.subject.trim();
                let skill = subject.split_whitespace().next().unwrap_or_default();
                if skill.is_empty() {
                    continue;
                }
                let refused = !skills.is_match(skill);
                (skill.to_string(), command_args(&mail.text), true, refused)
            }
        });
    }
    config.default.as_ref().map(|skill| {
        (
            skill.clone(),
            json!({ "subject": mail.subject, "text": mail.text }),
            false,
            false,
        )
    })
}

/// A command mail's args: the body as a JSON object, else `{text}`.
fn command_args(body: &str) -> Value {
    match serde_json::from_str::<Value>(body.trim()) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ if body.trim().is_empty() => json!({}),
        _ => json!({ "text": body.trim() }),
    }
}
