//! What `skillgate serve` puts in force when a reload reads its config file again: the HTTP
//! settings as the flags, their variables and the file now give them (flags still win), the
//! SMTP listener's certificate read again from its files, and the names of changed settings
//! that only a restart applies.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::websocket::{WsConfig, WsSettings};
use crate::config::{ConfigErrors, ConfigFile};
use crate::gateway::email::tls::LiveCert;
use crate::gateway::http::{HttpConfig, HttpSettings, Reconfigure};
use crate::kernel::Kernel;
use crate::reload::ApplyConfig;

/// What the server started with, to tell what a reload changes.
struct Given {
    /// The flags and their variables (they win over the file).
    http: HttpSettings,
    websocket: WsSettings,
    project: PathBuf,
    /// The sections whose doors and store are made once, as the server started with them.
    started: [String; 3],
}

/// The [`ApplyConfig`] of a server started with `file` and the `http` and `websocket` flags,
/// whose HTTP door `reconfigure` changes and whose SMTP listener offers `cert`; none when it has
/// neither.
pub fn applier(
    kernel: Kernel,
    (reconfigure, cert): (Option<Reconfigure>, Option<Arc<LiveCert>>),
    (http, websocket): (HttpSettings, WsSettings),
    (project, file): (&Path, &ConfigFile),
) -> Option<ApplyConfig> {
    if reconfigure.is_none() && cert.is_none() {
        return None;
    }
    let given = Given {
        http,
        websocket,
        project: project.to_path_buf(),
        started: made_once(file),
    };
    // What was last put in force: a reload that changes nothing rebuilds nothing.
    let last = Mutex::new(Some(given.fingerprint(&kernel, file)));
    Some(Arc::new(move |file: &ConfigFile| {
        // A certificate renewed in place is offered from now on; a half-written one is not.
        let renewed = match &cert {
            Some(cert) => cert.reload()?,
            None => false,
        };
        if renewed {
            tracing::info!(
                "the SMTP listener's certificate was read again: STARTTLS offers the new one"
            );
        }
        let seen = given.fingerprint(&kernel, file);
        let Some(reconfigure) = reconfigure
            .as_ref()
            .filter(|_| last.lock().as_deref() != Some(seen.as_str()))
        else {
            return Ok(renewed.then(Vec::new));
        };
        let origin = |path: &str| file.origin(path);
        let settings = given.http.clone().or(file.http.clone());
        let websocket = given.websocket.clone().or(file.websocket.clone());
        let mut config = HttpConfig::resolve(&given.project, settings, &origin)?;
        config.websocket = WsConfig::resolve(websocket, &origin)?;
        let applied = reconfigure.apply(config).map_err(|message| {
            let mut errors = ConfigErrors::default();
            errors.at("http", message);
            errors.located(&origin)
        })?;
        *last.lock() = Some(seen);
        let mut need_restart: Vec<String> = applied
            .need_restart
            .iter()
            .map(ToString::to_string)
            .collect();
        let now = made_once(file);
        for (i, section) in ["store", "slack", "email"].into_iter().enumerate() {
            if now[i] != given.started[i] {
                need_restart.push(section.to_string());
            }
        }
        Ok(Some(need_restart))
    }))
}

impl Given {
    /// The HTTP settings as `file` and the flags give them, and the skills (whose web routes
    /// the router serves).
    fn fingerprint(&self, kernel: &Kernel, file: &ConfigFile) -> String {
        let http = self.http.clone().or(file.http.clone());
        let websocket = self.websocket.clone().or(file.websocket.clone());
        let skills = kernel.registry().current().generation;
        format!("{http:?}\n{websocket:?}\n{skills}")
    }
}

/// The sections a restart alone applies: the store, Slack's and email's.
fn made_once(file: &ConfigFile) -> [String; 3] {
    [
        format!("{:?}", file.store),
        format!("{:?}", file.slack),
        format!("{:?}", file.email),
    ]
}
