//! Input from outside is data. What a transport hands the kernel (request bodies, frames, mails,
//! chat events) is checked here before anything runs: a `$`-prefixed key at the top of args is
//! an invoke option (`$context`, `$detached`) that would let a caller steer the pipeline (seed
//! the prompt, the middleware, `nonlocals`), so it is refused, naming the key.
//!
//! The kernel still reads `$NAME` keys from args of trusted callers inside the process (skills,
//! the command line), as spec 02 says; untrusted sandbox code is refused by the kernel itself.

use serde_json::{Value, json};

use crate::error::{ErrorKind, Result, SkillError};

/// Refuses args whose top level holds `$`-prefixed keys. Keys deeper down are plain data.
pub fn check_args(args: &Value) -> Result<()> {
    let Value::Object(map) = args else {
        return Ok(());
    };
    let refused: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| k.starts_with('$'))
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    let names = refused
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let errors: Vec<Value> = refused
        .iter()
        .map(|k| {
            json!({
                "path": format!("/{k}"),
                "message": format!("`{k}` is an invoke option, not an arg; args from a caller are data and may not use `$`-prefixed keys"),
            })
        })
        .collect();
    Err(SkillError::new(
        ErrorKind::InvalidArgs,
        format!("args from a caller may not use `$`-prefixed keys: {names} refused"),
    )
    .with_data(json!({ "errors": errors, "refused": refused })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_dollar_keys_are_refused_and_named() {
        let err = check_args(&json!({ "a": 1, "$context": {}, "$x": 2 })).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgs);
        assert!(err.message().contains("`$context`") && err.message().contains("`$x`"));
        assert_eq!(err.data().unwrap()["errors"][0]["path"], "/$context");
    }

    #[test]
    fn nested_dollar_keys_and_plain_args_pass() {
        assert!(check_args(&json!({ "a": { "$context": 1 } })).is_ok());
        assert!(check_args(&json!({})).is_ok());
        assert!(check_args(&json!("text")).is_ok());
    }
}
