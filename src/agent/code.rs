//! The invoke tool's callback (`invokeRef`): the model's JavaScript runs as an untrusted
//! anonymous skill through the full pipeline, in the run's sandbox session (its `memory`
//! persists across turns), under the tools the agent may use; what comes back to the model is
//! the result or the error, with the console lines, cut to a bounded size.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::agent::run::AgentRun;
use crate::context::Context;
use crate::error::{Result, SkillError};
use crate::kernel::schema;
use crate::sandbox::{self, Observer, Session, Untrusted};

/// The most characters of a result or error the model gets back from one code run.
pub const MAX_RESULT_CHARS: usize = 8_000;

/// The name of the one tool the model sees.
pub const INVOKE_TOOL: &str = "invoke";

/// What every code run of one agent shares.
pub(crate) struct CodeEnv {
    pub session: Session,
    /// The anonymous skill's `allowed-tools`.
    pub allowed: Value,
    /// The context the served skill serves (middleware mode), if any.
    pub target: Option<Context>,
}

pub(crate) async fn run_code(
    run: Arc<AgentRun>,
    env: Arc<CodeEnv>,
    ctx: Context,
    args: Arc<Value>,
) -> Result<Option<Value>> {
    let Some(code) = args.get("code").and_then(Value::as_str) else {
        return Ok(Some(answer(Err(SkillError::new(
            crate::error::ErrorKind::InvalidArgs,
            "the invoke tool takes `code`: a string of JavaScript",
        )))));
    };
    let over = {
        let mut state = run.state.lock();
        state.steps += 1;
        if state.steps > run.config.max_steps {
            state.steps_exhausted = true;
        }
        state.steps_exhausted
    };
    if over {
        return Ok(Some(answer(Err(run.limit(
            "maxSteps",
            run.config.max_steps,
            "no more code may run in this task",
        )))));
    }
    let observer = Arc::new(Observer::default());
    let mut metadata = Map::new();
    metadata.insert("allowed-tools".into(), env.allowed.clone());
    let options = Untrusted {
        args: None,
        metadata,
        target: env.target.clone(),
        session: Some(env.session.clone()),
        name: Some("agent-code".into()),
        observer: Some(observer.clone()),
    };
    let outcome = sandbox::run_untrusted_with(&ctx, code, options).await;
    let outcome = match outcome {
        Ok(value) if observer.finished() => accept(&run, value.unwrap_or(Value::Null)),
        Ok(value) => Ok(value.unwrap_or(Value::Null)),
        Err(err) => Err(err),
    };
    let mut out = answer(outcome);
    let (lines, dropped) = observer.console_lines();
    if !lines.is_empty() {
        let mut logs = lines.join("\n");
        if dropped > 0 {
            logs.push_str(&format!("\n({dropped} more lines left out)"));
        }
        out["logs"] = Value::String(clip(&logs));
    }
    if observer.finished() && out.get("error").is_none() {
        out["finished"] = Value::Bool(true);
    }
    Ok(Some(out))
}

/// A finished value ends the run once it matches `returns`.
fn accept(run: &AgentRun, value: Value) -> Result<Value> {
    if let Some((_, validator)) = &run.returns {
        schema::check(
            validator,
            &value,
            crate::error::ErrorKind::InvalidReturns,
            "the value given to ctx.manager.finish does not match the returns schema",
        )?;
    }
    run.state.lock().finished = Some(value.clone());
    Ok(value)
}

/// The tool result as the model reads it: `{result}` or `{error: {message, code}}`.
fn answer(outcome: Result<Value>) -> Value {
    match outcome {
        Ok(value) => {
            let text = match &value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if text.chars().count() > MAX_RESULT_CHARS {
                json!({ "result": clip(&text), "cut": true })
            } else {
                json!({ "result": value })
            }
        }
        Err(err) => {
            let mut error = json!({ "message": clip(err.message()), "code": err.kind().code() });
            if let Some(data) = err.data().filter(|d| d.to_string().len() <= 2_000) {
                error["data"] = data.clone();
            }
            json!({ "error": error })
        }
    }
}

/// Text cut to [`MAX_RESULT_CHARS`], saying how much was left out.
fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_RESULT_CHARS) {
        None => text.to_string(),
        Some((at, _)) => format!(
            "{}... ({} more characters left out)",
            &text[..at],
            text[at..].chars().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_results_reach_the_model_cut_and_marked() {
        let out = answer(Ok(Value::String("x".repeat(MAX_RESULT_CHARS + 10))));
        let text = out["result"].as_str().unwrap();
        assert!(text.ends_with("(10 more characters left out)"), "{text}");
        assert_eq!(out["cut"], true);
    }

    #[test]
    fn errors_reach_the_model_with_their_code() {
        let out = answer(Err(SkillError::failed("boom")));
        assert_eq!(out["error"]["message"], "boom");
        assert_eq!(out["error"]["code"], "failed");
    }
}
