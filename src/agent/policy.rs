//! The `agent` skill (the policy half of spec 05): reads the model config and limits, finds the
//! tools the agent may use and documents them, makes the invoke and hook callback refs, and
//! hands the loop to the provider skill with serializable args only. The trace lands on the
//! served skill's `locals.agent.trace` however the run ends.

use std::sync::Arc;

use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::agent::code::{self, CodeEnv};
use crate::agent::config::AgentConfig;
use crate::agent::discover;
use crate::agent::hook;
use crate::agent::run::AgentRun;
use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::gateway::reply::{RESPONSE_PATH, Reply};
use crate::kernel::InvokeOptions;
use crate::kernel::callbacks::CallbackRef;
use crate::sandbox::Session;
use crate::skills::native::{native, native_fn};
use crate::skills::tool::{NativeFn, Tool};

/// The policy skill's name (what `agent-execute` invokes).
pub const AGENT: &str = "agent";

/// Where `agent-execute` puts the served context on the agent skill's context.
pub const SERVED_PATH: &str = "agent.served";

/// The tag that marks this built-in `agent` (a project may replace it with its own).
pub const BUILT_IN_TAG: &str = "built-in-agent";

/// The user message when the caller gives none.
const DEFAULT_MESSAGE: &str = "Execute the task.";

pub fn tool() -> Tool {
    native(
        r#"
name: agent
description: Runs an LLM agent whose one tool is sandboxed JavaScript with the ctx API (the policy; the loop is the provider skill's).
metadata:
  visibility: hidden
  tags: [meta-internal, agent, built-in-agent]
  params:
    type: object
    properties:
      prompt: { type: string, description: "The system prompt." }
      config: { description: "metadata.model: `provider/model-id` or an object." }
      allowedTools: { description: "allowed-tools patterns for the agent's code (string or list)." }
      returns: { description: "JSON Schema the result must match." }
      events: { type: string, description: "Topic to emit agent events to." }
      name: { type: string, description: "Display name of this agent run." }
      memory: { type: object, description: "Seeds the sandbox's `memory` global." }
      userMessage: { type: string, description: "The first user message (default: Execute the task.)." }
    required: [config]
"#,
        |ctx, args| async move { run(ctx, args).await },
    )
}

async fn run(ctx: Context, args: Arc<Value>) -> Result<Option<Value>> {
    let config_value = args.get("config").cloned().unwrap_or(Value::Null);
    let config = AgentConfig::parse(&config_value)?;
    let served = ctx
        .extension::<Context>(SERVED_PATH)
        .map(|c| (*c).clone())
        .unwrap_or_else(|| ctx.clone());
    let skill = served.tool_name().to_string();
    let returns = compile_returns(args.get("returns"), &skill)?;
    if config.persistent && returns.is_some() {
        return Err(SkillError::config(format!(
            "`{skill}`: persistent mode (metadata.model.persistent) never ends, so it cannot give a structured result (metadata.returns)"
        )));
    }
    let memory = args.get("memory").cloned().unwrap_or(Value::Null);
    let session = Session::seeded(&memory)?;
    let inherited = ctx.get("nonlocals.agent")?.unwrap_or(Value::Null);
    let topic = args
        .get("events")
        .and_then(Value::as_str)
        .or_else(|| inherited.get("events").and_then(Value::as_str))
        .map(str::to_string);
    if let Some(topic) = &topic {
        crate::events::check_name("topic", topic)?;
    }
    let name = args
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(&skill)
        .to_string();
    // The conversation (spec 04's `sessionId`): the kept session's key, else the gateway's
    // conversation, else this root run; `turnIndex` is its turn (counted where the session
    // middleware keeps it, else 0: each request a conversation of its own).
    let kept = served.get("locals.session")?.unwrap_or(Value::Null);
    let session_id = kept
        .get("key")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or(served
            .get("nonlocals.gateway.sessionId")?
            .and_then(|v| v.as_str().map(str::to_string)))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| served.root_id());
    let turn_index = kept.get("turn").and_then(Value::as_u64).unwrap_or(0);
    let agent = json!({
        "events": topic,
        "contextId": served.id(),
        "ancestorContextId": inherited.get("contextId").cloned().unwrap_or(Value::Null),
        "sessionId": session_id,
        "turnIndex": turn_index,
    });
    // Visible to the provider below this skill, and to the served skill's own chain.
    served.set("nonlocals.agent", agent.clone())?;
    ctx.set("nonlocals.agent", agent)?;

    let provider_skill = config.provider_skill(&ctx.index());
    let excluded = [AGENT, provider_skill.as_str()];
    let allowed = args.get("allowedTools").cloned().unwrap_or(Value::Null);
    let found = discover::discover(&ctx.index(), &allowed, &skill, &excluded)?;
    let prompt = format!(
        "{}{}",
        args.get("prompt")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        discover::instructions(&found, returns.as_ref().map(|(s, _)| s))
    );
    let target = if served.has_other_target() {
        served.ctx_target().ok()
    } else {
        None
    };
    let user_message = args
        .get("userMessage")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| user_message(&served));
    let timeout = config.timeout;
    let run = Arc::new(AgentRun {
        config,
        served,
        ctx: ctx.clone(),
        returns,
        topic,
        reply: ctx.extension::<Reply>(RESPONSE_PATH),
        name: name.clone(),
        signal: ctx.signal().child_token(),
        state: Mutex::default(),
    });
    let env = Arc::new(CodeEnv {
        session,
        allowed: found.allowed,
        target,
    });
    let invoke_ref = callback(&ctx, "Runs the agent's code.", {
        let run = run.clone();
        Arc::new(move |ctx, args| code::run_code(run.clone(), env.clone(), ctx, args).boxed())
    });
    let hook_ref = callback(&ctx, "Receives the agent's lifecycle events.", {
        let run = run.clone();
        Arc::new(move |_ctx, args| hook::hook(run.clone(), args).boxed())
    });
    run.emit(
        "agent-start",
        json!({ "name": name, "skill": skill, "model": format!("{}/{}", run.config.provider, run.config.model) }),
    )
    .await;
    let provider_args = json!({
        "prompt": prompt,
        "config": config_value,
        "invokeRef": invoke_ref.name(),
        "hookRef": hook_ref.name(),
        "userMessage": user_message,
        "skillName": skill,
        // Over a serializable boundary the signal is its state; the live signal is the
        // provider's own `run.signal`, aborted with it (the seed below).
        "agentSignal": { "aborted": false },
    });
    let mut options = InvokeOptions::default();
    options.context.signal = Some(run.signal.clone());
    let call = ctx.invoke(provider_skill.as_str(), provider_args, options);
    let stopped = async {
        match timeout {
            None => run.signal.cancelled().await,
            Some(limit) => {
                if tokio::time::timeout(limit, run.signal.cancelled())
                    .await
                    .is_err()
                {
                    run.fail(run.limit(
                        "timeout",
                        format!("{limit:?}"),
                        "the run took longer than its wall clock allows",
                    ));
                }
            }
        }
    };
    // A failed or aborted run ends here, whatever the provider does with its signal.
    let outcome = tokio::select! {
        biased;
        outcome = call => outcome,
        () = stopped => Err(ctx.abort_error().unwrap_or_else(|| {
            SkillError::new(ErrorKind::Aborted, "aborted: the agent's signal")
        })),
    };
    let outcome = match run.failure() {
        Some(failure) => Err(failure),
        None => outcome,
    };
    drop((invoke_ref, hook_ref));
    run.save_trace();
    match &outcome {
        Ok(result) => {
            let (tokens_in, tokens_out, turns, steps) = {
                let s = run.state.lock();
                (s.tokens_in, s.tokens_out, s.turns, s.steps)
            };
            run.emit(
                "agent-complete",
                json!({
                    "result": result.as_deref().cloned().unwrap_or(Value::Null),
                    "turns": turns, "steps": steps,
                    "usage": { "inputTokens": tokens_in, "outputTokens": tokens_out },
                }),
            )
            .await;
        }
        Err(err) => {
            run.emit(
                "agent-error",
                json!({ "message": err.message(), "code": err.kind().code() }),
            )
            .await;
        }
    }
    outcome.map(|r| r.map(|v| (*v).clone()))
}

/// The first user message: the task, with the served skill's args when it has any.
fn user_message(served: &Context) -> String {
    let args = served.args();
    match args.as_object() {
        Some(map) if !map.is_empty() => format!(
            "{DEFAULT_MESSAGE}\nArguments: {}",
            serde_json::to_string(&*args).unwrap_or_default()
        ),
        _ => DEFAULT_MESSAGE.to_string(),
    }
}

fn compile_returns(
    schema: Option<&Value>,
    skill: &str,
) -> Result<Option<(Value, Arc<jsonschema::Validator>)>> {
    let Some(schema) = schema.filter(|s| !s.is_null()) else {
        return Ok(None);
    };
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        SkillError::new(
            ErrorKind::Config,
            format!("`{skill}`: metadata.returns is not a valid JSON Schema: {e}"),
        )
    })?;
    Ok(Some((schema.clone(), Arc::new(validator))))
}

/// A callback ref on `ctx`'s kernel running `body`.
fn callback(ctx: &Context, description: &str, body: NativeFn) -> CallbackRef {
    ctx.kernel().callback_ref(|name| {
        native_fn(
            &format!(
                "name: {name}\ndescription: {description}\nmetadata:\n  visibility: hidden\n  tags: [meta-internal, agent]\n"
            ),
            body,
        )
    })
}
