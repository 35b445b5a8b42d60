//! Setting values that read the same from a flag, a `SKILLGATE_*` variable and the config file:
//! lists (`a,b` on the command line, a YAML list or the same string in the file), seconds, and
//! API keys (`name=sha256:<hex>,...`, or `{name, hash, skills}` entries in the file).

use crate::config::ConfigErrors;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A list: comma-separated on the command line, a list (or a comma-separated string) in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct List(pub Vec<String>);

impl FromStr for List {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<List, Self::Err> {
        Ok(List(
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        ))
    }
}

impl<'de> Deserialize<'de> for List {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<List, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            Items(Vec<String>),
        }
        Ok(match Form::deserialize(d)? {
            Form::Text(s) => s.parse().unwrap_or_default(),
            Form::Items(items) => List(items),
        })
    }
}

/// A duration written as a number of seconds (`2.5`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds(pub Duration);

impl FromStr for Seconds {
    type Err = String;
    fn from_str(s: &str) -> Result<Seconds, String> {
        let secs: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a number of seconds"))?;
        seconds(secs)
    }
}

fn seconds(secs: f64) -> Result<Seconds, String> {
    Duration::try_from_secs_f64(secs)
        .map(Seconds)
        .map_err(|_| format!("{secs} is not a number of seconds (0 or more)"))
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seconds, D::Error> {
        seconds(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// One API key as configured: a name, the SHA-256 hash of the key, the skills it may invoke.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySpec {
    pub name: String,
    pub hash: String,
    /// Skill name patterns the key may invoke (default: all).
    #[serde(default)]
    pub skills: Vec<String>,
    /// Topic name patterns the key may read and emit on; default: every non-reserved topic for
    /// a key without `skills`, none for a key limited to some skills.
    #[serde(default)]
    pub topics: Option<Vec<String>>,
    /// The control plane: schedules, subscriptions, other principals' queues, reserved topics
    /// (to read), `web-send` by name.
    #[serde(default)]
    pub admin: bool,
}

/// API keys: `name=sha256:<hex>,...` on the command line (an unnamed one is `key-<8 hex digits
/// of its hash>`), each
/// optionally followed by `;admin`, `;skills=a|b*` and `;topics=x|y.*` (globs separated by `|`;
/// `;topics=` alone is none); a list of [`KeySpec`] (or the same string) in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyList(pub Vec<KeySpec>);

impl FromStr for KeyList {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<KeyList, Self::Err> {
        let List(items) = s.parse()?;
        Ok(KeyList(
            items
                .into_iter()
                .map(|item| {
                    let mut parts = item.split(';').map(str::trim);
                    let first = parts.next().unwrap_or_default();
                    let (name, hash) = first.split_once('=').unwrap_or(("", first));
                    let mut spec = KeySpec {
                        // Named after its hash, not its place in the list: the name is the key's
                        // principal, which owns schedules and queues, and must not pass to
                        // another secret when the list changes.
                        name: if name.is_empty() {
                            let digest = hash.trim().trim_start_matches("sha256:");
                            format!("key-{}", digest.get(..8).unwrap_or(digest))
                        } else {
                            name.to_string()
                        },
                        hash: hash.to_string(),
                        skills: Vec::new(),
                        topics: None,
                        admin: false,
                    };
                    let globs = |list: &str| -> Vec<String> {
                        list.split('|')
                            .map(str::trim)
                            .filter(|g| !g.is_empty())
                            .map(str::to_string)
                            .collect()
                    };
                    for part in parts {
                        match part.split_once('=') {
                            None if part == "admin" => spec.admin = true,
                            Some(("skills", list)) => spec.skills = globs(list),
                            Some(("topics", list)) => spec.topics = Some(globs(list)),
                            // A word it does not know makes the hash unreadable: the key is
                            // refused at start with its name, never taken with fewer limits.
                            _ => spec.hash = format!("{hash};{part}"),
                        }
                    }
                    spec
                })
                .collect(),
        ))
    }
}

impl<'de> Deserialize<'de> for KeyList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyList, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            Items(Vec<KeySpec>),
        }
        Ok(match Form::deserialize(d)? {
            Form::Text(s) => s.parse().unwrap_or_default(),
            Form::Items(items) => KeyList(items),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_list_reads_the_same_from_a_flag_and_from_the_file() {
        let flag: List = "a, b,,c".parse().unwrap();
        let file: List = serde_json::from_value(json!(["a", "b", "c"])).unwrap();
        let text: List = serde_json::from_value(json!("a,b,c")).unwrap();
        assert_eq!(flag, file);
        assert_eq!(file, text);
    }

    #[test]
    fn keys_read_from_a_flag_or_as_entries() {
        let flag: KeyList = "ci=sha256:ab,sha256:cd".parse().unwrap();
        assert_eq!(flag.0[0].name, "ci");
        assert_eq!(
            flag.0[1].name, "key-cd",
            "an unnamed key is named after its hash"
        );
        let file: KeyList = serde_json::from_value(
            json!([{ "name": "ci", "hash": "sha256:ab", "skills": ["r-*"] }]),
        )
        .unwrap();
        assert_eq!(file.0[0].skills, ["r-*"]);
    }

    #[test]
    fn a_flag_key_takes_admin_skills_and_topics_after_semicolons() {
        let flag: KeyList = "ops=sha256:ab;admin,bot=sha256:cd;skills=r-*|hello;topics=orders.*"
            .parse()
            .unwrap();
        assert!(flag.0[0].admin && flag.0[0].hash == "sha256:ab");
        assert_eq!(flag.0[1].skills, ["r-*", "hello"]);
        assert_eq!(
            flag.0[1].topics.as_deref(),
            Some(&["orders.*".to_string()][..])
        );
        let odd: KeyList = "x=sha256:ab;root".parse().unwrap();
        assert_eq!(odd.0[0].hash, "sha256:ab;root");
    }

    #[test]
    fn seconds_refuse_negative_values() {
        assert_eq!(
            "2.5".parse::<Seconds>().unwrap().0,
            Duration::from_millis(2500)
        );
        assert!("-1".parse::<Seconds>().is_err());
        assert!(serde_json::from_value::<Seconds>(json!(-1)).is_err());
    }
}

/// A key of a section that holds a secret: its value is written in a file as an `${env.NAME}`
/// reference, never as text. Each section declares its own (`SECRETS` in its module).
#[derive(Debug, Clone, Copy)]
pub struct Secret {
    /// The key below the section (`bot-token`, `imap.password`).
    pub key: &'static str,
    /// A URL, which gives its secret away only when it carries a password.
    pub url: bool,
    /// The variable the error message suggests.
    pub example: &'static str,
}

impl Secret {
    /// What is wrong with `written` at this key in `place` ("the file"), if it gives the
    /// secret away.
    pub fn refuses(&self, written: &str, place: &str) -> Option<String> {
        if written.contains("${env.") || (self.url && !has_password(written)) {
            return None;
        }
        let what = if self.url || self.key.ends_with("password") {
            "a password"
        } else {
            "a secret"
        };
        Some(format!(
            "{what} is written in {place}; use a reference such as `${{env.{}}}`",
            self.example
        ))
    }
}

/// True when a URL carries a password (`user:password@`, or `password=`).
pub fn has_password(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let userinfo = after_scheme.split(['/', '?']).next().unwrap_or_default();
    userinfo
        .rsplit_once('@')
        .is_some_and(|(user, _)| user.contains(':'))
        || url.contains("password=")
}

/// `value`, when given, into `slot`; below `least` it is a mistake at `path`.
pub fn at_least(
    errors: &mut ConfigErrors,
    path: &str,
    (value, least): (Option<usize>, usize),
    slot: &mut usize,
) {
    if let Some(n) = value {
        if n < least {
            errors.at(path, format!("must be at least {least}"));
        }
        *slot = n;
    }
}

/// A receive budget (`total` at `paths.0`) and one client's share of it (`per_peer` at
/// `paths.1`) must each hold one whole body or message (`unit` bytes, the setting `unit_key`),
/// or the bound would not count it whole; each one short of it is a mistake.
pub fn share_fits(
    errors: &mut ConfigErrors,
    paths: (&str, &str),
    (total, per_peer): (usize, usize),
    (unit_key, unit): (&str, usize),
) {
    for (path, value) in [paths.1, paths.0].into_iter().zip([per_peer, total]) {
        if value < unit {
            errors.at(
                path,
                format!(
                    "must be at least `{unit_key}` ({unit} bytes): one holds up to that much of it"
                ),
            );
        }
    }
}

/// `value`, when given, into `slot`; zero seconds is a mistake at `path`.
pub fn above_zero(
    errors: &mut ConfigErrors,
    path: &str,
    value: Option<Seconds>,
    slot: &mut Duration,
) {
    if let Some(Seconds(t)) = value {
        if t.is_zero() {
            errors.at(path, "must be above 0 seconds");
        }
        *slot = t;
    }
}
