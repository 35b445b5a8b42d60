//! `${env.NAME}` references in the config file: secrets (tokens, passwords, store URLs) are
//! written as references and read from the environment, so the file can be committed and the
//! values never appear in it, in a log line or in an error (errors name the reference only).

use std::sync::Arc;

use serde_json::Value;

/// Where settings read their variables (Slack's tokens, `SKILLGATE_SMTP_*`,
/// `SKILLGATE_IMAP_PASSWORD`): the process environment, or a set an embedder or a test gives.
#[derive(Clone)]
pub struct Vars(Arc<Lookup>);

/// A variable's value by its name.
type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl Vars {
    /// The process environment.
    pub fn process() -> Vars {
        Vars(Arc::new(|name: &str| std::env::var(name).ok()))
    }

    /// Exactly these variables.
    pub fn of(pairs: &[(&str, &str)]) -> Vars {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Vars(Arc::new(move |name: &str| map.get(name).cloned()))
    }

    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }
}

impl std::fmt::Debug for Vars {
    /// Values are secrets: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vars(..)")
    }
}

/// Replaces every `${env.NAME}` in the strings of `value` (a whole string, or part of one) by
/// the variable's value; `missing` gets the path and name of each reference that is not set.
pub fn resolve(value: &mut Value, path: &str, missing: &mut Vec<(String, String)>) {
    match value {
        Value::String(text) if text.contains("${env.") => {
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${env.") {
                out.push_str(&rest[..start]);
                let after = &rest[start + "${env.".len()..];
                let Some(end) = after.find('}') else {
                    out.push_str(&rest[start..]);
                    rest = "";
                    break;
                };
                let name = &after[..end];
                match std::env::var(name) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => missing.push((path.to_string(), name.to_string())),
                }
                rest = &after[end + 1..];
            }
            out.push_str(rest);
            *text = out;
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                resolve(item, &format!("{path}[{i}]"), missing);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let inner = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                resolve(item, &inner, missing);
            }
        }
        _ => {}
    }
}

/// True when `value` is (or holds) an `${env.NAME}` reference.
pub fn is_reference(value: &str) -> bool {
    value.contains("${env.")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn references_are_replaced_in_place_and_missing_ones_named_with_their_path() {
        let mut value =
            json!({ "a": "${env.PATH}", "b": ["x-${env.SKILLGATE_SURELY_UNSET_VAR}-y"] });
        let mut missing = Vec::new();
        resolve(&mut value, "", &mut missing);
        assert_eq!(value["a"], json!(std::env::var("PATH").unwrap()));
        assert_eq!(
            missing,
            vec![("b[0]".to_string(), "SKILLGATE_SURELY_UNSET_VAR".to_string())]
        );
    }
}
