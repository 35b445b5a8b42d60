//! The lifecycle hook the policy gives the provider (`hookRef`): it writes every event to the
//! trace, enforces the turn, step and token limits, and answers turn-end and error with the
//! directive the spec describes (stop, continue with a reminder, retry with backoff).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::run::{AgentRun, MAX_REMINDERS};
use crate::error::{ErrorKind, Result, SkillError};

/// The longest wait between two attempts in persistent mode.
pub const PERSISTENT_BACKOFF_CAP: Duration = Duration::from_secs(30);

/// The first wait after an error in persistent mode; each next one doubles.
const PERSISTENT_BACKOFF_BASE: Duration = Duration::from_millis(500);

pub(crate) async fn hook(run: Arc<AgentRun>, args: Arc<Value>) -> Result<Option<Value>> {
    // A refusal fails the whole run, not only this call: a provider that caught it and went on
    // would find `agentSignal` aborted.
    answer(&run, &args).await.map_err(|err| run.fail(err))
}

async fn answer(run: &Arc<AgentRun>, args: &Value) -> Result<Option<Value>> {
    let kind = args.get("type").and_then(Value::as_str).unwrap_or_default();
    let mut fields = args.clone();
    if let Value::Object(map) = &mut fields {
        map.remove("type");
    }
    match kind {
        "turn-start" => {
            let turn = {
                let mut state = run.state.lock();
                state.turns += 1;
                state.turns
            };
            if let Some(max) = run.config.max_turns
                && turn > max
            {
                return Err(run.limit("maxTurns", max, "no answer within that many model calls"));
            }
            run.record("turn-start", fields).await;
            Ok(None)
        }
        "message" => {
            if args.get("delta") == Some(&Value::Bool(true))
                && let Some(text) = args.get("text").and_then(Value::as_str)
            {
                run.stream_text(text);
            }
            run.record("message", fields).await;
            Ok(None)
        }
        "reasoning" | "retry" | "context-edit" | "tool-call" | "tool-result" => {
            run.record(kind, fields).await;
            Ok(None)
        }
        "turn-end" => {
            run.record("turn-end", fields).await;
            turn_end(run, args).map(Some)
        }
        "error" => {
            run.record("error", fields).await;
            Ok(Some(on_error(run, args)))
        }
        other => Err(SkillError::new(
            ErrorKind::InvalidArgs,
            format!(
                "agent hook: unknown event type `{other}` (turn-start, message, reasoning, tool-call, tool-result, turn-end, error, retry)"
            ),
        )),
    }
}

/// After a model call: stop with the result, go on, or remind the model of the schema.
fn turn_end(run: &AgentRun, args: &Value) -> Result<Value> {
    if let Some(usage) = args.get("usage") {
        run.add_usage(usage)?;
    }
    let (exhausted, finished) = {
        let state = run.state.lock();
        (state.steps_exhausted, state.finished.clone())
    };
    if exhausted {
        return Err(run.limit(
            "maxSteps",
            run.config.max_steps,
            "the model kept asking to run code",
        ));
    }
    if let Some(result) = finished {
        return Ok(json!({ "stop": true, "result": result }));
    }
    let tool_calls = args.get("toolCalls").and_then(Value::as_u64).unwrap_or(0);
    if tool_calls > 0 {
        return Ok(json!({ "continue": true }));
    }
    if run.config.persistent {
        return Ok(json!({ "continue": true, "message": "Continue." }));
    }
    let text = args.get("result").cloned().unwrap_or(Value::Null);
    let Some((schema, validator)) = &run.returns else {
        return Ok(json!({ "stop": true, "result": text }));
    };
    // A model that answers with the JSON itself instead of finishing through code.
    if let Some(value) = text.as_str().and_then(parse_json_answer)
        && validator.is_valid(&value)
    {
        return Ok(json!({ "stop": true, "result": value }));
    }
    let reminders = {
        let mut state = run.state.lock();
        state.reminders += 1;
        state.reminders
    };
    if reminders > MAX_REMINDERS {
        return Err(SkillError::new(
            ErrorKind::InvalidReturns,
            format!(
                "the agent gave no result matching the returns schema after {MAX_REMINDERS} reminders"
            ),
        ));
    }
    Ok(json!({ "continue": true, "message": reminder(schema) }))
}

/// The reminder sent when a turn ends without a structured result.
pub fn reminder(schema: &Value) -> String {
    format!(
        "You have not finished. This task must end with a value matching this JSON Schema, given by running code that calls `ctx.manager.finish(value)` with the invoke tool:\n{}",
        serde_json::to_string(schema).unwrap_or_default()
    )
}

/// Text that is a JSON value, possibly in a fenced block.
fn parse_json_answer(text: &str) -> Option<Value> {
    let text = text.trim();
    let inner = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .and_then(|t| t.strip_suffix("```"))
        .unwrap_or(text);
    serde_json::from_str(inner.trim()).ok()
}

/// After a failed model call: persistent runs try again with backoff; others stop.
fn on_error(run: &AgentRun, args: &Value) -> Value {
    if !run.config.persistent {
        return json!({ "stop": true });
    }
    let attempt = args.get("attempt").and_then(Value::as_u64).unwrap_or(1);
    json!({ "retry": true, "wait": persistent_backoff(attempt).as_millis() as u64 })
}

/// The wait before attempt `attempt + 1` in persistent mode: doubling, capped at 30 s.
pub fn persistent_backoff(attempt: u64) -> Duration {
    let exp = attempt.saturating_sub(1).min(16) as u32;
    PERSISTENT_BACKOFF_BASE
        .saturating_mul(1 << exp)
        .min(PERSISTENT_BACKOFF_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistent_backoff_doubles_and_stops_at_thirty_seconds() {
        assert_eq!(persistent_backoff(1), Duration::from_millis(500));
        assert_eq!(persistent_backoff(2), Duration::from_secs(1));
        assert_eq!(persistent_backoff(7), Duration::from_secs(30));
        assert_eq!(persistent_backoff(1000), Duration::from_secs(30));
    }

    #[test]
    fn a_json_answer_is_read_from_plain_or_fenced_text() {
        assert_eq!(parse_json_answer("{\"a\":1}"), Some(json!({"a": 1})));
        assert_eq!(
            parse_json_answer("```json\n{\"a\":1}\n```"),
            Some(json!({"a": 1}))
        );
        assert_eq!(parse_json_answer("the answer is 1"), None);
    }
}
