//! Input from outside is data. What a transport hands the kernel (request bodies, frames, mails,
//! chat events) is checked here before anything runs or is announced: a directive key
//! (`$context`, `$detached`) at any depth would let a caller steer the pipeline (seed the
//! prompt, the middleware, `nonlocals`) or, kept in stored args, steer it later, so it is
//! refused, naming its path. Other `$` keys (`$schema`, `$gt`) are plain data.
//!
//! The kernel refuses the same at every level below the project (see `kernel::authority`); this
//! check answers the caller before the message is announced.

use serde_json::Value;

use crate::error::Result;
use crate::kernel::authority::{Level, check_data};

/// Refuses args holding a directive key at any depth.
pub fn check_args(args: &Value) -> Result<()> {
    check_data(args, Level::Caller)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn directive_keys_are_refused_at_any_depth_and_named_by_path() {
        let err = check_args(&json!({ "a": 1, "$context": {} })).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgs);
        assert!(err.message().contains("`$context`"), "{}", err.message());
        assert_eq!(err.data().unwrap()["errors"][0]["path"], "/$context");
        let err = check_args(&json!({ "args": { "x": [{ "$detached": true }] } })).unwrap_err();
        assert_eq!(
            err.data().unwrap()["errors"][0]["path"],
            "/args/x/0/$detached"
        );
    }

    #[test]
    fn other_dollar_keys_and_plain_args_pass() {
        assert!(check_args(&json!({ "$schema": "s", "q": { "$gt": 1 } })).is_ok());
        assert!(check_args(&json!({})).is_ok());
        assert!(check_args(&json!("text")).is_ok());
    }
}
