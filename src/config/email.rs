//! Email settings: the `email:` section of skillgate.yaml as written ([`EmailSettings`]), with
//! `SKILLGATE_SMTP_BIND`, `SKILLGATE_SMTP_RELAY` and `SKILLGATE_IMAP_PASSWORD` as defaults,
//! resolved into the [`EmailConfig`] the transport runs with.

use std::net::SocketAddr;
use std::time::Duration;

use globset::{Glob, GlobMatcher, GlobSet};
use regex::Regex;
use serde::Deserialize;

use crate::config::ConfigErrors;
use crate::config::routes;
pub use crate::config::routes::Target;
use crate::config::values::{Seconds, Secret};
use crate::gateway::policy::access::glob_set;

/// The keys of the `email` section that hold secrets: written as `${env.NAME}` references, never
/// as text in a file (for a URL, only when it carries a password).
pub const SECRETS: [Secret; 2] = [
    Secret {
        key: "relay",
        url: true,
        example: "SMTP_RELAY_URL",
    },
    Secret {
        key: "imap.password",
        url: false,
        example: "IMAP_PASSWORD",
    },
];

/// The `email` section as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct EmailSettings {
    /// The address answers come from (and mail to it is ours: never answered).
    pub from: Option<String>,
    pub smtp: Option<SmtpSettings>,
    /// A mailbox to take mail from.
    pub imap: Option<ImapSettings>,
    /// Where answers are sent: `smtp://user:pass@host:587`, `smtps://…` (lettre's form; write
    /// credentials as `${env.NAME}`).
    pub relay: Option<String>,
    /// Senders whose mail runs skills (globs such as `*@example.org`) [default: anyone].
    pub allowed_senders: Option<Vec<String>>,
    pub routes: Option<Vec<RouteSettings>>,
    /// The skill for mail no route takes.
    pub default: Option<String>,
    /// Least time between two answers to one sender [default: 60 s].
    pub reply_window: Option<Seconds>,
    /// Largest mail taken, in bytes [default: 10 MiB].
    pub max_size: Option<usize>,
    /// Mail whose sender DKIM/DMARC (or the trusted relay) does not verify gets no answer at
    /// all [default: false: it runs its route's skill, without command routes or session
    /// history, and is answered only at its `From`].
    pub require_verified_sender: Option<bool>,
    /// The authserv-id of a relay in front that checks DKIM/DMARC itself (`mx.example.org`):
    /// its topmost `Authentication-Results` header is believed.
    pub trusted_relay: Option<String>,
    /// The DNS server DKIM keys and DMARC records are asked of (`10.0.0.2:53`) [default: the
    /// system's resolver].
    pub dns_resolver: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SmtpSettings {
    /// Where the SMTP listener listens (`0.0.0.0:2525`).
    pub bind: Option<String>,
    /// The name the listener gives in its greeting [default: the `from` domain].
    pub hostname: Option<String>,
    /// A certificate and key (PEM files) to offer STARTTLS with [default:
    /// `SKILLGATE_SMTP_TLS_CERT` and `SKILLGATE_SMTP_TLS_KEY`; without them no STARTTLS].
    pub tls: Option<TlsSettings>,
    /// Refuse mail from clients that have not said STARTTLS [default: false].
    pub require_tls: Option<bool>,
    /// SMTP sessions at once; a client past it is told 421 and let go, so idle clients cannot
    /// take the file descriptors HTTP needs [default: 256].
    pub max_connections: Option<usize>,
    /// Bytes of DATA being received across all sessions at once; a message that would pass it
    /// waits for room (its client's bytes stay unread) [default: 64 MiB].
    pub max_data_in_flight: Option<usize>,
    /// How long a message waits for room under `max-data-in-flight` before its client is told
    /// 452 and let go (it tries again later) [default: 30 s].
    pub max_data_wait: Option<Seconds>,
    /// Bytes of DATA read per second across all sessions; past it reading waits (TCP pushes
    /// back on the senders), so floods of DATA cannot take the cores the other doors need
    /// [default: 16 MiB; 0: unpaced].
    pub max_data_rate: Option<usize>,
}

/// The mailbox mail is taken from.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ImapSettings {
    pub host: Option<String>,
    /// [default: 993 with TLS, 143 without]
    pub port: Option<u16>,
    /// TLS from the first byte (port 993) [default: true].
    pub tls: Option<bool>,
    /// A PEM file of one more CA to trust (a private mail server) beside the system's.
    pub ca: Option<String>,
    pub user: Option<String>,
    /// Written as `${env.NAME}` [default: `SKILLGATE_IMAP_PASSWORD`].
    pub password: Option<String>,
    /// [default: INBOX]
    pub folder: Option<String>,
    /// How often the folder is looked at when the server has no IDLE, and how long one IDLE
    /// lasts before it is renewed [default: 60 s].
    pub poll_interval: Option<Seconds>,
}

impl EmailSettings {
    /// Every skill the routes name, with where, to check they exist.
    pub fn named_skills(&self) -> Vec<(String, String)> {
        let routes = self.routes.iter().flatten();
        routes::named_skills(
            "email",
            routes.map(|r| r.skill.as_ref()),
            self.default.as_ref(),
        )
    }
}

/// The mailbox as the poller uses it.
#[derive(Debug, Clone)]
pub struct ImapConfig {
    pub host: String,
    pub port: u16,
    pub tls: bool,
    pub ca: Option<String>,
    pub user: String,
    pub password: String,
    pub folder: String,
    pub poll_interval: Duration,
}

impl ImapSettings {
    fn resolve(
        self,
        env: &dyn Fn(&str) -> Option<String>,
        errors: &mut ConfigErrors,
    ) -> Option<ImapConfig> {
        let mut missing = |key: &str, example: &str| {
            errors.at(format!("email.imap.{key}"), format!("missing ({example})"));
        };
        let host = self.host.filter(|h| !h.trim().is_empty());
        if host.is_none() {
            missing("host", "`host: imap.example.org`");
        }
        let user = self.user.filter(|u| !u.trim().is_empty());
        if user.is_none() {
            missing("user", "`user: bot@example.org`");
        }
        let password = self.password.or_else(|| env("SKILLGATE_IMAP_PASSWORD"));
        if password.is_none() {
            missing(
                "password",
                "`password: ${env.IMAP_PASSWORD}`, or set SKILLGATE_IMAP_PASSWORD",
            );
        }
        let tls = self.tls.unwrap_or(true);
        Some(ImapConfig {
            host: host?,
            port: self.port.unwrap_or(if tls { 993 } else { 143 }),
            tls,
            ca: self.ca,
            user: user?,
            password: password?,
            folder: self.folder.unwrap_or_else(|| "INBOX".into()),
            poll_interval: self.poll_interval.map_or(Duration::from_secs(60), |s| s.0),
        })
    }
}

/// The listener's certificate.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TlsSettings {
    /// The certificate chain, PEM, the server's own certificate first.
    pub cert: String,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: String,
}

/// One route as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RouteSettings {
    #[serde(rename = "ref")]
    pub skill: Option<String>,
    /// A glob on the sender (`*@example.org`).
    pub from: Option<String>,
    /// A glob on any recipient (`reports@…`).
    pub to: Option<String>,
    /// A regular expression on the subject; its named groups become args.
    pub subject: Option<String>,
    /// The subject's first word names the skill; the body is its args (a JSON object, else
    /// `{text}`).
    pub command: Option<bool>,
    /// With `command`: the skills a mail may name (globs; required, `['*']` for every public
    /// one).
    pub skills: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct Route {
    pub target: Target,
    pub from: Option<GlobMatcher>,
    pub to: Option<GlobMatcher>,
    pub subject: Option<Regex>,
}

/// What the email transport runs with.
#[derive(Debug, Clone)]
pub struct EmailConfig {
    pub from: String,
    /// Where the SMTP listener listens (none: mail comes by IMAP only).
    pub bind: Option<SocketAddr>,
    pub imap: Option<ImapConfig>,
    pub hostname: String,
    /// STARTTLS with this certificate and key (PEM paths).
    pub tls: Option<TlsSettings>,
    pub require_tls: bool,
    pub relay: Option<String>,
    pub allowed: Option<GlobSet>,
    pub routes: Vec<Route>,
    pub default: Option<String>,
    pub reply_window: Duration,
    pub max_size: usize,
    /// SMTP sessions at once.
    pub max_connections: usize,
    /// Bytes of DATA being received across all sessions at once.
    pub max_data_in_flight: usize,
    /// How long a message waits for room under `max_data_in_flight`.
    pub max_data_wait: Duration,
    /// Bytes of DATA read per second across all sessions (0: unpaced).
    pub max_data_rate: usize,
    pub require_verified_sender: bool,
    pub trusted_relay: Option<String>,
    pub dns_resolver: Option<SocketAddr>,
}

impl EmailConfig {
    /// `None` when email is not configured (neither `smtp.bind` nor `imap`); every mistake,
    /// under `email.<key>`.
    pub fn resolve(
        settings: EmailSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<EmailConfig>, ConfigErrors> {
        let smtp = settings.smtp.clone().unwrap_or_default();
        let bind = smtp.bind.clone().or_else(|| env("SKILLGATE_SMTP_BIND"));
        if bind.is_none() && settings.imap.is_none() {
            return Ok(None);
        }
        let mut errors = ConfigErrors::default();
        let bind = bind.and_then(|bind| match bind.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                errors.at(
                    "email.smtp.bind",
                    format!("`{bind}` is not an address such as 0.0.0.0:2525"),
                );
                None
            }
        });
        let imap = settings
            .imap
            .clone()
            .and_then(|imap| imap.resolve(env, &mut errors));
        let from = settings.from.unwrap_or_default().to_ascii_lowercase();
        if !from.contains('@') {
            errors.at(
                "email.from",
                "the address answers come from is missing (`from: bot@example.org`)",
            );
        }
        let relay = settings.relay.or_else(|| env("SKILLGATE_SMTP_RELAY"));
        if let Some(relay) = &relay
            && !(relay.starts_with("smtp://") || relay.starts_with("smtps://"))
        {
            errors.at("email.relay", "must be an smtp:// or smtps:// URL");
        }
        let allowed = settings.allowed_senders.and_then(|globs| {
            let patterns = globs
                .iter()
                .map(|g| (g.clone(), Glob::new(&g.to_ascii_lowercase())));
            glob_set("pattern", patterns)
                .map_err(|e| errors.at("email.allowed-senders", e.to_string()))
                .ok()
        });
        let routes: Vec<Route> = settings
            .routes
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, route)| resolve_route(route, &format!("email.routes[{i}]"), &mut errors))
            .collect();
        if routes.is_empty() && settings.default.is_none() {
            errors.at("email", "give `routes` or `default` (the skill mail runs)");
        }
        let tls = smtp.tls.clone().or_else(|| {
            match (
                env("SKILLGATE_SMTP_TLS_CERT"),
                env("SKILLGATE_SMTP_TLS_KEY"),
            ) {
                (Some(cert), Some(key)) => Some(TlsSettings { cert, key }),
                _ => None,
            }
        });
        let require_tls = smtp.require_tls.unwrap_or(false);
        if require_tls && tls.is_none() {
            errors.at(
                "email.smtp.require-tls",
                "needs `email.smtp.tls` (a certificate and key to offer STARTTLS with)",
            );
        }
        let dns_resolver = settings.dns_resolver.as_deref().and_then(|addr| {
            parse_resolver(addr)
                .map_err(|e| errors.at("email.dns-resolver", e))
                .ok()
        });
        let hostname = smtp
            .hostname
            .unwrap_or_else(|| from.split('@').nth(1).unwrap_or("localhost").to_string());
        errors.or_ok(Some(EmailConfig {
            from,
            bind,
            imap,
            hostname,
            tls,
            require_tls,
            relay,
            allowed,
            routes,
            default: settings.default,
            reply_window: settings
                .reply_window
                .map_or(Duration::from_secs(60), |s| s.0),
            max_size: settings.max_size.unwrap_or(10 * 1024 * 1024),
            max_connections: smtp.max_connections.unwrap_or(256).max(1),
            max_data_in_flight: smtp.max_data_in_flight.unwrap_or(64 * 1024 * 1024).max(1),
            max_data_wait: smtp.max_data_wait.map_or(Duration::from_secs(30), |s| s.0),
            max_data_rate: smtp.max_data_rate.unwrap_or(16 * 1024 * 1024),
            require_verified_sender: settings.require_verified_sender.unwrap_or(false),
            trusted_relay: settings.trusted_relay.filter(|r| !r.trim().is_empty()),
            dns_resolver,
        }))
    }
}

fn resolve_route(route: RouteSettings, at: &str, errors: &mut ConfigErrors) -> Route {
    let mut glob = |written: &Option<String>, key: &str| {
        let written = written.as_ref()?;
        match Glob::new(&written.to_ascii_lowercase()) {
            Ok(glob) => Some(glob.compile_matcher()),
            Err(e) => {
                errors.at(format!("{at}.{key}"), format!("`{written}`: {e}"));
                None
            }
        }
    };
    let from = glob(&route.from, "from");
    let to = glob(&route.to, "to");
    let subject = routes::pattern(route.subject.as_deref(), format!("{at}.subject"), errors);
    let target = routes::target(
        route.skill,
        route.command,
        route.skills.as_deref(),
        at,
        errors,
    );
    Route {
        target,
        from,
        to,
        subject,
    }
}

/// `ip:port`, or an IP alone (port 53).
fn parse_resolver(addr: &str) -> Result<SocketAddr, String> {
    addr.parse::<SocketAddr>()
        .or_else(|_| {
            addr.parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .map_err(|_| format!("`{addr}` is not an address such as 10.0.0.2:53"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imap_only(imap: ImapSettings) -> EmailSettings {
        EmailSettings {
            from: Some("bot@example.org".into()),
            imap: Some(imap),
            default: Some("brief".into()),
            ..EmailSettings::default()
        }
    }

    #[test]
    fn an_imap_mailbox_alone_configures_email_with_its_defaults() {
        let imap = ImapSettings {
            host: Some("imap.example.org".into()),
            user: Some("bot".into()),
            ..ImapSettings::default()
        };
        let env = |name: &str| (name == "SKILLGATE_IMAP_PASSWORD").then(|| "s3cret".to_string());
        let config = EmailConfig::resolve(imap_only(imap), &env)
            .unwrap()
            .unwrap();
        assert_eq!(config.bind, None);
        let imap = config.imap.unwrap();
        assert_eq!((imap.port, imap.tls), (993, true));
        assert_eq!(imap.folder, "INBOX");
        assert_eq!(imap.password, "s3cret");
        assert_eq!(imap.poll_interval, Duration::from_secs(60));
    }

    #[test]
    fn a_command_route_without_skills_is_refused_naming_the_key() {
        let settings = |skills: Option<Vec<String>>| EmailSettings {
            routes: Some(vec![RouteSettings {
                command: Some(true),
                skills,
                ..RouteSettings::default()
            }]),
            ..imap_only(ImapSettings {
                host: Some("imap.example.org".into()),
                user: Some("bot".into()),
                password: Some("p".into()),
                ..ImapSettings::default()
            })
        };
        let errors = EmailConfig::resolve(settings(None), &|_| None)
            .unwrap_err()
            .to_string();
        assert!(errors.contains("email.routes[0].skills"), "{errors}");
        assert!(EmailConfig::resolve(settings(Some(vec!["deploy-*".into()])), &|_| None).is_ok());
    }

    #[test]
    fn a_mailbox_without_host_user_or_password_names_each() {
        let errors = EmailConfig::resolve(imap_only(ImapSettings::default()), &|_| None)
            .unwrap_err()
            .to_string();
        for key in ["host", "user", "password"] {
            assert!(
                errors.contains(&format!("email.imap.{key}: missing")),
                "{errors}"
            );
        }
    }

    #[test]
    fn require_tls_without_a_certificate_is_refused() {
        let settings = EmailSettings {
            from: Some("bot@example.org".into()),
            smtp: Some(SmtpSettings {
                bind: Some("127.0.0.1:0".into()),
                require_tls: Some(true),
                ..SmtpSettings::default()
            }),
            default: Some("brief".into()),
            ..EmailSettings::default()
        };
        let errors = EmailConfig::resolve(settings, &|_| None).unwrap_err();
        assert!(
            errors.0[0]
                .to_string()
                .starts_with("email.smtp.require-tls: needs"),
            "{errors:?}"
        );
    }
}
