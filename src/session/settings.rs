//! `metadata.session`: `true`, or `{ key, capture, maxEntries }`, read with errors that name
//! the field.

use serde_json::Value;

use crate::error::{Result, SkillError};

/// The entries a session keeps when `maxEntries` is not given.
pub const DEFAULT_MAX_ENTRIES: usize = 50;
/// The most entries a session may keep.
pub const MAX_ENTRIES: usize = 10_000;

/// What one captured entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    Args,
    Result,
    /// The agent trace (`locals.agent.trace`), by the `$agent` sentinel.
    Agent,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The session key; `None` takes the gateway's conversation (`nonlocals.gateway.sessionId`).
    pub key: Option<String>,
    pub capture: Vec<Capture>,
    pub max_entries: usize,
}

impl Settings {
    pub fn parse(value: &Value) -> Result<Settings> {
        let mut out = Settings {
            key: None,
            capture: vec![Capture::Args, Capture::Result, Capture::Agent],
            max_entries: DEFAULT_MAX_ENTRIES,
        };
        let map = match value {
            Value::Bool(true) => return Ok(out),
            Value::Object(map) => map,
            other => {
                return Err(bad(format!(
                    "metadata.session must be `true` or an object with key, capture, maxEntries; found {other}"
                )));
            }
        };
        for (field, value) in map {
            match field.as_str() {
                "key" => {
                    out.key = match value {
                        Value::String(s) if !s.is_empty() => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        // An interpolated key that found nothing: no session for this run.
                        Value::Null => None,
                        other => {
                            return Err(bad(format!(
                                "metadata.session.key must be a string, found {other}"
                            )));
                        }
                    }
                }
                "capture" => out.capture = captures(value)?,
                "maxEntries" | "max-entries" => {
                    out.max_entries = value
                        .as_u64()
                        .map(|n| n as usize)
                        .filter(|n| (1..=MAX_ENTRIES).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "metadata.session.maxEntries must be a whole number from 1 to {MAX_ENTRIES}, found {value}"
                            ))
                        })?;
                }
                other => {
                    return Err(bad(format!(
                        "metadata.session.{other} is not a session setting (known: key, capture, maxEntries)"
                    )));
                }
            }
        }
        Ok(out)
    }
}

fn captures(value: &Value) -> Result<Vec<Capture>> {
    let items: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        Value::String(_) => vec![value],
        other => {
            return Err(bad(format!(
                "metadata.session.capture must be a list of args, result, $agent; found {other}"
            )));
        }
    };
    items
        .into_iter()
        .map(|item| match item.as_str() {
            Some("args") => Ok(Capture::Args),
            Some("result") => Ok(Capture::Result),
            Some("$agent" | "agent") => Ok(Capture::Agent),
            _ => Err(bad(format!(
                "metadata.session.capture: {item} is not args, result or $agent"
            ))),
        })
        .collect()
}

fn bad(message: String) -> SkillError {
    SkillError::config(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn true_captures_args_result_and_the_agent_trace_fifty_deep() {
        let s = Settings::parse(&json!(true)).unwrap();
        assert_eq!(s.capture, [Capture::Args, Capture::Result, Capture::Agent]);
        assert_eq!(s.max_entries, DEFAULT_MAX_ENTRIES);
        assert_eq!(s.key, None);
    }

    #[test]
    fn fields_are_read_and_mistakes_name_the_field() {
        let s =
            Settings::parse(&json!({"key": "k", "capture": ["result"], "maxEntries": 3})).unwrap();
        assert_eq!(
            (s.key.as_deref(), s.capture, s.max_entries),
            (Some("k"), vec![Capture::Result], 3)
        );
        for (value, says) in [
            (json!({"maxEntries": 0}), "metadata.session.maxEntries"),
            (
                json!({"capture": ["args", "memory"]}),
                "\"memory\" is not args",
            ),
            (
                json!({"keep": 1}),
                "metadata.session.keep is not a session setting",
            ),
            (json!("yes"), "must be `true` or an object"),
            (json!({"key": []}), "metadata.session.key must be a string"),
        ] {
            let err = Settings::parse(&value).unwrap_err();
            assert!(err.message().contains(says), "{value}: {}", err.message());
        }
    }
}
