//! One model call, with the model hook around it when the config names hooks (spec 04,
//! ModelContext): a `model-call` invocation whose `locals.model` holds a copy of the messages,
//! the model and the tool definitions. Hooks are middleware skills (`role: middleware`) on that
//! invocation; they compose like any middleware:
//!
//! - `setModel(m)`: `ctxTarget(ctx).locals.model.model = m`
//! - `removeTools(...names)`: filter `locals.model.toolDefs`
//! - `addSystemMessage(text)` / `addMessage(msg)`: edit `locals.model.messages`
//! - `skipCall(response)`: `ctxTarget(ctx).manager.finish(response)` without `next()`
//! - `abort(reason)`: throw (or `ctx.manager.abort`), which ends the agent run
//!
//! Without hooks the provider is called directly.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::agent::config::AgentConfig;
use crate::agent::metrics;
use crate::agent::provider::retry::{self, RetryPolicy};
use crate::agent::provider::{
    Delta, Message, ModelRequest, ModelResponse, Provider, ProviderError, ToolDef,
};
use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::kernel::InvokeOptions;
use crate::skills::native::native;
use crate::skills::tool::Tool;

/// The skill model hooks wrap.
pub const MODEL_CALL: &str = "model-call";

/// Where the call's environment sits on the `model-call` context.
const ENV_PATH: &str = "agent.model-call";

/// What one call needs besides its JSON: the provider, the retry policy, where deltas go.
pub(crate) struct CallEnv {
    pub provider: Arc<dyn Provider>,
    pub policy: RetryPolicy,
    pub deltas: mpsc::UnboundedSender<Delta>,
    /// Retries so far (attempt, error, wait).
    pub retries: mpsc::UnboundedSender<(u32, String, Duration)>,
}

/// What the loop knows about the call it is making.
#[derive(Clone, Copy)]
pub(crate) struct CallInfo<'a> {
    pub config: &'a AgentConfig,
    pub turn_index: u32,
    pub call_index: u32,
    pub session_id: &'a str,
    pub agent_name: &'a str,
    pub instructions: &'a str,
}

/// Makes one call: through the hooks when there are any, else straight to the provider.
pub(crate) async fn call(
    ctx: &Context,
    env: Arc<CallEnv>,
    request: ModelRequest,
    info: CallInfo<'_>,
) -> Result<ModelResponse> {
    if info.config.hooks.is_empty() {
        return direct(ctx, &env, &request).await;
    }
    let model = json!({
        "agent": { "name": info.agent_name, "model": request.model, "instructions": info.instructions },
        "model": request.model,
        "messages": request.messages,
        "history": request.messages,
        "toolDefs": request.tools.iter().map(|t| json!({
            "name": t.name, "description": t.description, "jsonSchema": t.schema,
        })).collect::<Vec<_>>(),
        "config": { "temperature": request.temperature, "maxTokens": request.max_tokens },
        "callIndex": info.call_index,
        "turnIndex": info.turn_index,
        "sessionId": info.session_id,
        "startedAt": crate::agent::run::now_ms(),
        "output": Value::Null,
    });
    let mut options = InvokeOptions::default();
    options.context.locals.insert("model".into(), model);
    options.context.locals.insert(
        "middleware".into(),
        Value::Array(
            info.config
                .hooks
                .iter()
                .map(|h| json!({ "name": h }))
                .collect(),
        ),
    );
    options
        .context
        .extensions
        .push((ENV_PATH.into(), env.clone()));
    let out = ctx.invoke(MODEL_CALL, json!({}), options).await?;
    from_json(out.as_deref().unwrap_or(&Value::Null))
}

/// The provider call with retries, deltas and retries sent to the loop.
async fn direct(ctx: &Context, env: &CallEnv, request: &ModelRequest) -> Result<ModelResponse> {
    let deltas = env.deltas.clone();
    let retries = env.retries.clone();
    let provider = env.provider.name();
    // The OpenTelemetry GenAI semantic conventions for a chat call.
    let span = tracing::info_span!(
        "chat",
        otel.name = format!("chat {}", request.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = request.model.as_str(),
        gen_ai.request.temperature = request.temperature,
        gen_ai.request.max_tokens = request.max_tokens,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    let run = crate::kernel::timings::of(ctx);
    let start_us = run.as_ref().map_or(0, |r| r.now_us());
    let out = retry::call(
        env.provider.as_ref(),
        request,
        env.policy,
        &mut |delta| {
            let _ = deltas.send(delta);
        },
        &mut |attempt, err, wait| {
            let _ = retries.send((attempt, err.to_string(), wait));
        },
    )
    .instrument(span.clone())
    .await;
    metrics::record(&span, provider, &request.model, &out);
    if let Some(run) = run {
        let (usage, model, outcome) = match &out {
            Ok(answer) => {
                let stop = serde_json::to_value(answer.stop).unwrap_or_default();
                let stop = stop.as_str().unwrap_or_default().to_string();
                let model = match answer.model.as_str() {
                    "" => request.model.clone(),
                    named => named.to_string(),
                };
                (answer.usage, model, Ok(stop))
            }
            Err(err) => (
                Default::default(),
                request.model.clone(),
                Err(err.to_string()),
            ),
        };
        run.turn(crate::kernel::timings::Turn {
            provider,
            model: &model,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            outcome: outcome.as_deref().map_err(Clone::clone),
            start_us,
        });
    }
    out.map_err(|err| model_error(&err))
}

/// A provider's error as a skill error: its words, and what kind of failure it was.
pub(crate) fn model_error(err: &ProviderError) -> SkillError {
    let kind = match err {
        ProviderError::Unauthorized { .. } => "unauthorized",
        ProviderError::ContextLength { .. } => "context-length",
        ProviderError::RateLimited { .. } => "rate-limited",
        ProviderError::Server { .. } => "server",
        ProviderError::Request { .. } => "request",
        ProviderError::Timeout { .. } => "timeout",
        ProviderError::Malformed { .. } => "malformed",
        ProviderError::Network { .. } => "network",
    };
    // The vendor down, overloaded or silent is a service the run depends on being unavailable;
    // a refused key or request is the server's own failure.
    let upstream = matches!(
        err,
        ProviderError::Server { .. }
            | ProviderError::RateLimited { .. }
            | ProviderError::Timeout { .. }
            | ProviderError::Network { .. }
    );
    SkillError::new(ErrorKind::Failed, err.to_string())
        .with_data(json!({ "rule": "model-error", "error": kind, "upstream": upstream }))
}

/// The `model-call` skill: the innermost step of the model hook, the call itself.
pub fn tool() -> Tool {
    native(
        r#"
name: model-call
description: One model call of an agent run; model hooks are middleware around it (locals.model is the ModelContext).
metadata:
  visibility: hidden
  tags: [meta-internal, agent]
"#,
        |ctx, _args| async move {
            let env = ctx.extension::<CallEnv>(ENV_PATH).ok_or_else(|| {
                SkillError::new(
                    ErrorKind::Failed,
                    "model-call runs only inside an agent run",
                )
            })?;
            let model = ctx.get("locals.model")?.unwrap_or(Value::Null);
            let request = request_of(&model)?;
            let response = direct(&ctx, &env, &request).await?;
            Ok(Some(to_json(&response)))
        },
    )
}

/// The request a hook left in `locals.model`.
fn request_of(model: &Value) -> Result<ModelRequest> {
    let messages: Vec<Message> = serde_json::from_value(model["messages"].clone())
        .map_err(|e| bad(format!("locals.model.messages: {e}")))?;
    let tools = model["toolDefs"]
        .as_array()
        .map(|defs| {
            defs.iter()
                .map(|d| ToolDef {
                    name: d["name"].as_str().unwrap_or_default().to_string(),
                    description: d["description"].as_str().unwrap_or_default().to_string(),
                    schema: d["jsonSchema"].clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ModelRequest {
        model: model["model"]
            .as_str()
            .ok_or_else(|| bad("locals.model.model must be a string"))?
            .to_string(),
        messages,
        tools,
        temperature: model["config"]["temperature"].as_f64(),
        max_tokens: model["config"]["maxTokens"].as_u64().map(|n| n as u32),
    })
}

fn to_json(response: &ModelResponse) -> Value {
    json!({
        "text": response.text,
        "toolCalls": response.tool_calls,
        "usage": response.usage,
        "stop": response.stop,
        "model": response.model,
        "retries": response.retries,
    })
}

/// A response from the call or from a hook's `skipCall`: `text` and `toolCalls` may be left out.
fn from_json(value: &Value) -> Result<ModelResponse> {
    if !value.is_object() {
        return Err(bad(format!(
            "a model hook skipped the call with {value}; give an object such as {{\"text\": \"...\"}}"
        )));
    }
    let field = |key: &str| value.get(key).cloned().filter(|v| !v.is_null());
    Ok(ModelResponse {
        text: value["text"].as_str().unwrap_or_default().to_string(),
        tool_calls: match field("toolCalls") {
            Some(v) => serde_json::from_value(v)
                .map_err(|e| bad(format!("the model response's toolCalls: {e}")))?,
            None => Vec::new(),
        },
        usage: field("usage")
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        stop: field("stop")
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        model: value["model"].as_str().unwrap_or_default().to_string(),
        retries: value["retries"].as_u64().unwrap_or(0) as u32,
    })
}

fn bad(message: impl Into<String>) -> SkillError {
    SkillError::new(ErrorKind::InvalidArgs, message)
}
