//! Whether a recorded run can be run again as it was, and what with: its skill, its args whole,
//! and the principal and level it ran for (`POST /runs/{id}/retry`, `skillgate runs retry`).

use std::time::Duration;

use serde_json::Value;

use crate::events::records::StoredRun;

/// What a retry runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    pub skill: String,
    pub args: Value,
    /// The recorded principal's id (`key:<name>`, `local`, `email:<address>`, …).
    pub principal: String,
    /// The run was named by project code serving its principal (a declared route, a
    /// handler), not by the principal: it runs again at that level.
    pub project_level: bool,
}

/// What `run` would be run again with, or why it cannot be (the record does not hold its args
/// whole, or it started more than `window` before `now_ms`).
pub fn retry_of(run: &StoredRun, window: Duration, now_ms: i64) -> Result<Retry, String> {
    let detail: Value = serde_json::from_str(&run.detail).unwrap_or(Value::Null);
    if detail["redacted"] == Value::Bool(true) {
        return Err(format!(
            "run `{}` cannot be retried: fields of its args were redacted in the record (`writeOnly` or `x-secret` in the params, or credential headers), so the record does not hold what it was given",
            run.id
        ));
    }
    if detail["cut"]["args"] == Value::Bool(true) {
        return Err(format!(
            "run `{}` cannot be retried: its args were larger than the record keeps and were cut",
            run.id
        ));
    }
    let age = now_ms.saturating_sub(run.started_ms);
    if age > i64::try_from(window.as_millis()).unwrap_or(i64::MAX) {
        return Err(format!(
            "run `{}` cannot be retried: it started more than {} s ago, past the retry window (`--retry-window`)",
            run.id,
            window.as_secs()
        ));
    }
    let args = serde_json::from_str(&run.args)
        .map_err(|e| format!("run `{}`: its recorded args are not JSON: {e}", run.id))?;
    Ok(Retry {
        skill: run.skill.clone(),
        args,
        principal: run.principal.clone(),
        project_level: detail["level"] == "project",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(args: &str, detail: Value, started_ms: i64) -> StoredRun {
        StoredRun {
            seq: 0,
            id: "r1".into(),
            door: "http".into(),
            principal: "key:ops".into(),
            skill: "hello".into(),
            started_ms,
            duration_us: 10,
            status: "failed".into(),
            problem: Some("internal".into()),
            parent: None,
            args: args.into(),
            result: None,
            detail: detail.to_string(),
        }
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_run_whose_args_are_whole_is_retried_with_them_and_its_level() {
        let retry = retry_of(&run(r#"{"name":"Ada"}"#, json!({}), 1_000), DAY, 2_000).unwrap();
        assert_eq!(retry.args, json!({ "name": "Ada" }));
        assert_eq!(
            (retry.skill.as_str(), retry.project_level),
            ("hello", false)
        );
        let routed = retry_of(&run("{}", json!({ "level": "project" }), 0), DAY, 0).unwrap();
        assert!(routed.project_level);
    }

    #[test]
    fn a_run_with_redacted_or_cut_args_or_past_the_window_is_not_retried() {
        let redacted = retry_of(&run("{}", json!({ "redacted": true }), 0), DAY, 0);
        assert!(redacted.unwrap_err().contains("redacted"));
        let cut = json!({ "cut": { "args": true, "result": false } });
        assert!(
            retry_of(&run("{}", cut, 0), DAY, 0)
                .unwrap_err()
                .contains("cut")
        );
        let result_cut = json!({ "cut": { "args": false, "result": true } });
        assert!(retry_of(&run("{}", result_cut, 0), DAY, 0).is_ok());
        let old = retry_of(&run("{}", json!({}), 0), DAY, 86_400_001);
        assert!(old.unwrap_err().contains("--retry-window"));
    }
}
