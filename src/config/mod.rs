//! The project's configuration, read by this one module: `skillgate.yaml` in the project (or
//! `--config FILE`) with one section per transport plus the store, `${env.NAME}` references for
//! secrets, and the flags and `SKILLGATE_*` variables, which share each section's struct (clap
//! `Args` with `env`) and win over the file.
//!
//! Reading reports every mistake at once, each with its file, line and column when known and the
//! setting's path (`http.rate-limit: unknown field ...`, `store.url: the environment variable
//! `DB_URL` is not set`): one run shows all of them.
//!
//! - `errors`: [`ConfigErrors`], the list of mistakes.
//! - `env`: `${env.NAME}` references.
//! - `locate`: where a path is written in the file.
//! - `values`: lists, seconds and API keys that read the same from a flag and from the file.
//! - `store`: the `store` section and the event store flags.
//! - `http`, `websocket`, `slack`, `email`: each door's section, as given and as it runs; the
//!   doors read their settings from here, and this module names no door.

pub mod email;
pub mod env;
pub mod errors;
pub mod http;
mod locate;
pub mod routes;
pub mod slack;
pub mod store;
pub mod values;
pub mod websocket;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub use errors::{ConfigError, ConfigErrors};
pub use store::StoreSettings;

use crate::config::email::EmailSettings;
use crate::config::http::HttpSettings;
use crate::config::slack::SlackSettings;
use crate::config::websocket::WsSettings;

/// The config file used when `--config` is not given, if it exists.
pub const DEFAULT_FILE: &str = "skillgate.yaml";

/// The sections a config file may have.
pub const SECTIONS: [&str; 5] = ["http", "websocket", "slack", "email", "store"];

/// The config file as read: its sections (empty when there is no file).
#[derive(Debug, Default)]
pub struct ConfigFile {
    /// The file, when there is one.
    pub path: Option<PathBuf>,
    text: String,
    pub http: HttpSettings,
    pub websocket: WsSettings,
    pub slack: SlackSettings,
    pub email: EmailSettings,
    pub store: StoreSettings,
}

impl ConfigFile {
    /// Reads `explicit` (`--config`), else `skillgate.yaml` in `project` if it exists.
    pub fn read(project: &Path, explicit: Option<&Path>) -> Result<ConfigFile, ConfigErrors> {
        let path = match explicit {
            Some(path) => Some(path.to_path_buf()),
            None => Some(project.join(DEFAULT_FILE)).filter(|p| p.is_file()),
        };
        let Some(path) = path else {
            return Ok(ConfigFile::default());
        };
        let mut errors = ConfigErrors::default();
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                errors.push(Some(shown), "", format!("cannot read the config file: {e}"));
                return Err(errors);
            }
        };
        let mut file = ConfigFile {
            path: Some(path),
            text,
            ..ConfigFile::default()
        };
        let mut root = file.parse(&shown)?;
        // Secrets come from the environment, not written in the file.
        for (section, secrets) in [
            ("slack", &slack::SECRETS[..]),
            ("email", &email::SECRETS[..]),
            ("store", &store::SECRETS[..]),
        ] {
            for secret in secrets {
                let mut written = root.get(section);
                for key in secret.key.split('.') {
                    written = written.and_then(|value| value.get(key));
                }
                if let Some(refused) = written
                    .and_then(Value::as_str)
                    .and_then(|text| secret.refuses(text, "the file"))
                {
                    let path = format!("{section}.{}", secret.key);
                    errors.push(file.origin(&path), path, refused);
                }
            }
        }
        let mut missing = Vec::new();
        for (key, value) in root.iter_mut() {
            env::resolve(value, key, &mut missing);
        }
        for (path, name) in missing {
            errors.push(
                file.origin(&path),
                path,
                format!("the environment variable `{name}` (in `${{env.{name}}}`) is not set"),
            );
        }
        for (key, value) in root {
            match key.as_str() {
                "http" => {
                    if let Some(http) = file.section(&key, value, &mut errors) {
                        file.http = http;
                    }
                }
                "websocket" => {
                    if let Some(websocket) = file.section(&key, value, &mut errors) {
                        file.websocket = websocket;
                    }
                }
                "slack" => {
                    if let Some(slack) = file.section(&key, value, &mut errors) {
                        file.slack = slack;
                    }
                }
                "email" => {
                    if let Some(email) = file.section(&key, value, &mut errors) {
                        file.email = email;
                    }
                }
                "store" => {
                    if let Some(store) = file.section(&key, value, &mut errors) {
                        file.store = store;
                    }
                }
                other => {
                    let hint = if HttpSettings::is_setting(other) {
                        format!("; HTTP settings go under `http:` (`http.{other}`)")
                    } else {
                        String::new()
                    };
                    errors.push(
                        file.origin(other),
                        other,
                        format!("unknown section (known: {}){hint}", SECTIONS.join(", ")),
                    );
                }
            }
        }
        errors.or_ok(file)
    }

    /// `file:line:column` of a setting's path, when the file has it.
    pub fn origin(&self, path: &str) -> Option<String> {
        let file = self.path.as_ref()?.display().to_string();
        Some(match locate::locate(&self.text, path) {
            Some((line, column)) => format!("{file}:{line}:{column}"),
            None => file,
        })
    }

    /// The top-level mapping (an empty file is an empty one).
    fn parse(&self, shown: &str) -> Result<Map<String, Value>, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        if self.text.trim().is_empty() {
            return Ok(Map::new());
        }
        match serde_saphyr::from_str::<Value>(&self.text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(Value::Null) => Ok(Map::new()),
            Ok(_) => {
                errors.push(
                    Some(shown.to_string()),
                    "",
                    format!("must be a mapping of sections ({})", SECTIONS.join(", ")),
                );
                Err(errors)
            }
            Err(err) => {
                let message = err.to_string();
                let message = message.lines().next().unwrap_or_default().to_string();
                let origin = match err.location() {
                    Some(loc) => format!("{shown}:{}:{}", loc.line(), loc.column()),
                    None => shown.to_string(),
                };
                errors.push(Some(origin), "", message);
                Err(errors)
            }
        }
    }

    /// Reads one section; its first mistake is reported under its full path.
    fn section<T: DeserializeOwned>(
        &self,
        name: &str,
        value: Value,
        errors: &mut ConfigErrors,
    ) -> Option<T> {
        let value = if value.is_null() {
            Value::Object(Map::new())
        } else {
            value
        };
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(section) => Some(section),
            Err(err) => {
                let inner = err.path().to_string();
                let path = if inner == "." || inner.is_empty() {
                    name.to_string()
                } else {
                    format!("{name}.{inner}")
                };
                // An unknown field is reported where it is written: at its own path.
                let mut message = err.into_inner().to_string();
                if let Some(near) = unknown_field(&message).and_then(|f| nearest_field(f, &message))
                {
                    message.push_str(&format!("; did you mean `{near}`?"));
                }
                let at = match unknown_field(&message) {
                    Some(field) if !path.ends_with(&format!(".{field}")) => {
                        format!("{path}.{field}")
                    }
                    _ => path.clone(),
                };
                errors.push(self.origin(&at), at, message);
                None
            }
        }
    }
}

/// The known field closest to `unknown`, from serde's "…, expected one of `a`, `b`" message,
/// when one is close enough to be a slip of the keyboard.
fn nearest_field(unknown: &str, message: &str) -> Option<String> {
    let (_, expected) = message.split_once("expected ")?;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|known| (strsim::jaro_winkler(unknown, known), known))
        .filter(|(score, known)| *score > 0.8 || strsim::levenshtein(unknown, known) <= 2)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, known)| known.to_string())
}

/// The field named by serde's "unknown field `x`, expected ..." message.
fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project_with(text: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DEFAULT_FILE), text).unwrap();
        dir
    }

    #[test]
    fn every_mistake_is_reported_with_its_path_and_line() {
        let dir = project_with(
            "http:\n  bind: 127.0.0.1:0\n  rate-limit: 5\n  brust: 10\nslakc:\n  token: x\nstore:\n  url: ${env.SKILLGATE_SURELY_UNSET_VAR}\n",
        );
        let errors = ConfigFile::read(dir.path(), None).unwrap_err();
        let text = errors.to_string();
        assert_eq!(errors.0.len(), 3, "{text}");
        assert!(
            text.contains("skillgate.yaml:4:3: http.brust: unknown field `brust`"),
            "{text}"
        );
        assert!(
            text.contains("skillgate.yaml:5:1: slakc: unknown section"),
            "{text}"
        );
        assert!(
            text.contains("skillgate.yaml:8:3: store.url: the environment variable `SKILLGATE_SURELY_UNSET_VAR`"),
            "{text}"
        );
    }

    #[test]
    fn a_top_level_http_setting_says_where_it_belongs() {
        let dir = project_with("bind: 127.0.0.1:0\n");
        let text = ConfigFile::read(dir.path(), None).unwrap_err().to_string();
        assert!(text.contains("`http.bind`"), "{text}");
    }

    #[test]
    fn a_store_password_must_come_from_the_environment() {
        let dir = project_with("store:\n  url: postgres://app:hunter2@db/events\n");
        let text = ConfigFile::read(dir.path(), None).unwrap_err().to_string();
        assert!(
            text.contains("store.url: a password is written in the file"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        let dir = project_with("store:\n  url: ${env.PATH}\n");
        assert!(ConfigFile::read(dir.path(), None).is_ok());
    }

    #[test]
    fn an_unknown_key_near_a_known_one_is_reported_with_the_known_one() {
        let dir = project_with("http:\n  bnid: 127.0.0.1:0\n  rate-brust: 10\n");
        let text = ConfigFile::read(dir.path(), None).unwrap_err().to_string();
        assert!(
            text.contains("skillgate.yaml:2:3: http.bnid: unknown field `bnid`"),
            "{text}"
        );
        assert!(text.ends_with("did you mean `bind`?"), "{text}");
        let dir = project_with("websocket:\n  idle-timeuot: 5\n");
        let text = ConfigFile::read(dir.path(), None).unwrap_err().to_string();
        assert!(text.ends_with("did you mean `idle-timeout`?"), "{text}");
    }

    #[test]
    fn an_imap_password_must_come_from_the_environment() {
        let dir = project_with(
            "email:\n  from: bot@example.org\n  imap:\n    host: imap.example.org\n    user: bot\n    password: hunter2\n",
        );
        let text = ConfigFile::read(dir.path(), None).unwrap_err().to_string();
        assert!(
            text.contains(
                "skillgate.yaml:6:5: email.imap.password: a password is written in the file"
            ),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn sections_read_into_the_structs_flags_use() {
        let dir = project_with(
            "http:\n  bind: 127.0.0.1:9\n  allowed-hosts: [a.example]\n  api-keys:\n    - { name: ci, hash: \"sha256:00\", skills: [\"r-*\"] }\nstore:\n  url: memory\n  visibility: 500\n",
        );
        let file = ConfigFile::read(dir.path(), None).unwrap();
        assert_eq!(file.http.bind.unwrap().port(), 9);
        assert_eq!(file.http.allowed_hosts.unwrap().0, ["a.example"]);
        assert_eq!(file.http.api_keys.unwrap().0[0].skills, ["r-*"]);
        assert_eq!(file.store.url.as_deref(), Some("memory"));
        assert_eq!(file.store.visibility, Some(500));
    }
}
