//! Configuration errors, all of them at once: each names where it is (the file, line and column
//! when known, and the path of the setting) and what is wrong, so one run of `skillgate serve`
//! shows every mistake in a config instead of one per attempt.

use std::fmt;

/// One mistake in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// `file:line:column` (or just the file, or the flag or variable) the setting came from.
    pub origin: Option<String>,
    /// The setting's path (`http.rate-limit`, `slack.routes[2].ref`).
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(origin) = &self.origin {
            write!(f, "{origin}: ")?;
        }
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every mistake found; empty means the configuration is sound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn push(
        &mut self,
        origin: Option<String>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(ConfigError {
            origin,
            path: path.into(),
            message: message.into(),
        });
    }

    /// A mistake at `path`, whose place in the file is filled in later ([`ConfigErrors::located`]).
    pub fn at(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push(None, path, message);
    }

    /// These mistakes, each without an origin given the one `origin` finds for its path (the
    /// file, line and column it is written at).
    pub fn located(mut self, origin: &dyn Fn(&str) -> Option<String>) -> ConfigErrors {
        for error in &mut self.0 {
            if error.origin.is_none() {
                error.origin = origin(&error.path);
            }
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn extend(&mut self, more: ConfigErrors) {
        self.0.extend(more.0);
    }

    /// `Ok(value)` when nothing was found wrong.
    pub fn or_ok<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
