//! What `skillgate serve` puts in force when a reload reads its config file again: the HTTP
//! settings as the flags, their variables and the file now give them (flags still win), the
//! email and Slack doors' routes, the SMTP listener's certificate read again from its files,
//! and the names of changed settings that only a restart applies.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::email::EmailConfig;
use crate::config::env::Vars;
use crate::config::slack::SlackConfig;
use crate::config::websocket::{WsConfig, WsSettings};
use crate::config::{ConfigErrors, ConfigFile};
use crate::gateway::email::{Email, setup};
use crate::gateway::http::{HttpConfig, HttpSettings, Reconfigure};
use crate::gateway::slack::Slack;
use crate::kernel::Kernel;
use crate::reload::ApplyConfig;

/// What the server started with, to tell what a reload changes.
struct Given {
    /// The flags and their variables (they win over the file).
    http: HttpSettings,
    websocket: WsSettings,
    project: PathBuf,
    /// The store section as the server started with it (the store is opened once).
    started: String,
}

/// The doors a reload changes.
pub struct Reloaded {
    pub http: Option<Reconfigure>,
    pub email: Option<Arc<Email>>,
    pub slack: Option<Arc<Slack>>,
}

/// What was last put in force: a reload that changes nothing rebuilds nothing.
struct Last {
    http: String,
    email: String,
    slack: String,
}

/// The [`ApplyConfig`] of a server started with `file` and the `http` and `websocket` flags,
/// whose doors are `doors`; none when no door it has follows a reload.
pub fn applier(
    kernel: Kernel,
    doors: Reloaded,
    (http, websocket): (HttpSettings, WsSettings),
    (project, file): (&Path, &ConfigFile),
) -> Option<ApplyConfig> {
    if doors.http.is_none() && doors.email.is_none() && doors.slack.is_none() {
        return None;
    }
    let given = Given {
        http,
        websocket,
        project: project.to_path_buf(),
        started: format!("{:?}", file.store),
    };
    let last = Mutex::new(Last::of(&given, &kernel, file));
    let vars = Vars::process();
    Some(Arc::new(move |file: &ConfigFile| {
        // Everything is read and checked before anything is applied: a mistake applies nothing.
        // A certificate renewed in place is the exception: it is offered once it reads.
        let renewed = match doors.email.as_ref().and_then(|e| e.cert.as_ref()) {
            Some(cert) => cert.reload()?,
            None => false,
        };
        if renewed {
            tracing::info!(
                "the SMTP listener's certificate was read again: STARTTLS offers the new one"
            );
        }
        let seen = Last::of(&given, &kernel, file);
        let (http_changed, email_changed, slack_changed) = {
            let last = last.lock();
            (
                last.http != seen.http,
                last.email != seen.email,
                last.slack != seen.slack,
            )
        };
        let origin = |path: &str| file.origin(path);
        let http = match &doors.http {
            Some(reconfigure) if http_changed => {
                let settings = given.http.clone().or(file.http.clone());
                let websocket = given.websocket.clone().or(file.websocket.clone());
                let mut config = HttpConfig::resolve(&given.project, settings, &origin)?;
                config.websocket = WsConfig::resolve(websocket, &origin)?;
                Some((reconfigure, config))
            }
            _ => None,
        };
        let email = match &doors.email {
            Some(email) if email_changed => {
                let index = kernel.registry().current();
                let next = setup::resolve_routes(&index, file.email.clone(), &vars)
                    .map_err(|errors| errors.located(&origin))?;
                Some((email, next))
            }
            _ => None,
        };
        let slack = match &doors.slack {
            Some(slack) if slack_changed => {
                let index = kernel.registry().current();
                let next = crate::gateway::slack::setup::resolve(
                    &index,
                    &given.project,
                    file.slack.clone(),
                    &vars,
                )
                .map_err(|errors| errors.located(&origin))?;
                Some((slack, next))
            }
            _ => None,
        };
        if http.is_none() && email.is_none() && slack.is_none() {
            return Ok(renewed.then(Vec::new));
        }
        let mut need_restart: Vec<String> = Vec::new();
        if let Some((reconfigure, config)) = http {
            let applied = reconfigure.apply(config).map_err(|message| {
                let mut errors = ConfigErrors::default();
                errors.at("http", message);
                errors.located(&origin)
            })?;
            need_restart.extend(applied.need_restart.iter().map(ToString::to_string));
        }
        if let Some((email, next)) = email {
            need_restart.extend(reroute_email(email, next));
        }
        if let Some((slack, next)) = slack {
            need_restart.extend(reroute_slack(slack, next));
        }
        *last.lock() = seen;
        if format!("{:?}", file.store) != given.started {
            need_restart.push("store".to_string());
        }
        Ok(Some(need_restart))
    }))
}

/// Gives the email door's intake the routes of `next` (`None`: email taken out of the file,
/// which needs a restart); the settings that need a restart are named.
fn reroute_email(email: &Email, next: Option<EmailConfig>) -> Vec<String> {
    let Some(mut next) = next else {
        return vec!["email".to_string()];
    };
    let names = setup::keep_restart_settings(&email.config, &mut next);
    email.intake.reroute(next);
    names.into_iter().map(str::to_string).collect()
}

/// Gives the Slack door's intake the routes of `next` (`None`: Slack taken out, which needs a
/// restart); the settings that need a restart are named.
fn reroute_slack(slack: &Slack, next: Option<SlackConfig>) -> Vec<String> {
    let Some(mut next) = next else {
        return vec!["slack".to_string()];
    };
    let names = crate::gateway::slack::setup::keep_restart_settings(&slack.config, &mut next);
    slack.intake.reroute(next);
    names.into_iter().map(str::to_string).collect()
}

impl Last {
    fn of(given: &Given, kernel: &Kernel, file: &ConfigFile) -> Last {
        // The skills are in each: they carry web routes, are named by routes, and the main
        // skill's `metadata.slack` is Slack's settings too.
        let skills = kernel.registry().current().generation;
        Last {
            http: given.http_fingerprint(file, skills),
            email: format!("{:?}\n{skills}", file.email),
            slack: format!("{:?}\n{skills}", file.slack),
        }
    }
}

impl Given {
    /// The HTTP settings as `file` and the flags give them, and the skills' generation (their
    /// web routes are served).
    fn http_fingerprint(&self, file: &ConfigFile, skills: u64) -> String {
        let http = self.http.clone().or(file.http.clone());
        let websocket = self.websocket.clone().or(file.websocket.clone());
        format!("{http:?}\n{websocket:?}\n{skills}")
    }
}
