//! `agent-model`, the provider skill (the loop half of spec 05): talks to the model named by
//! the config, runs each `invoke` tool call through `invokeRef`, reports every step to
//! `hookRef` and follows its directives. Its args are serializable only, so any skill with the
//! same args can replace it (`model.agent`).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::agent::code::INVOKE_TOOL;
use crate::agent::config::AgentConfig;
use crate::agent::context_edit;
use crate::agent::model_call::{self, CallEnv, CallInfo};
use crate::agent::provider::retry::RetryPolicy;
use crate::agent::provider::{Delta, Message, ModelRequest, ModelResponse, ToolDef, select};
use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::kernel::InvokeOptions;
use crate::skills::native::native;
use crate::skills::tool::Tool;

/// The provider skill's name (the default of `model.agent`).
pub const NAME: &str = crate::agent::config::DEFAULT_PROVIDER_SKILL;

pub fn tool() -> Tool {
    native(
        r#"
name: agent-model
description: The agent loop over OpenAI-compatible, Anthropic and Bedrock models (the provider half of the agent).
metadata:
  visibility: hidden
  tags: [meta-internal, agent]
  params:
    type: object
    properties:
      prompt: { type: string }
      config: {}
      invokeRef: { type: string }
      hookRef: { type: string }
      userMessage: { type: string }
      skillName: { type: string }
      agentSignal: { type: object, description: "The agent's signal at the start; the live one is run.signal." }
    required: [config]
"#,
        |ctx, args| async move { until_aborted(ctx, args).await },
    )
}

/// The invoke tool as the model sees it.
fn invoke_def() -> ToolDef {
    ToolDef {
        name: INVOKE_TOOL.into(),
        description: "Run JavaScript with `ctx` in scope (the body of an async function). Use `await ctx.manager.invoke(name, args)` to call tools, `return` to see a value, `ctx.manager.finish(value)` to end the task.".into(),
        schema: json!({
            "type": "object",
            "properties": { "code": { "type": "string", "description": "JavaScript to run." } },
            "required": ["code"],
        }),
    }
}

struct Loop {
    ctx: Context,
    hook: Option<String>,
    invoke: Option<String>,
}

impl Loop {
    /// Reports to the hook; its directive, if any.
    async fn report(&self, event: Value) -> Result<Option<Value>> {
        let Some(hook) = &self.hook else {
            return Ok(None);
        };
        let out = self
            .ctx
            .invoke(hook.as_str(), event, InvokeOptions::default())
            .await?;
        Ok(out.map(|v| (*v).clone()).filter(|v| !v.is_null()))
    }

    async fn run_tool(&self, name: &str, input: &Value) -> Result<Value> {
        if name != INVOKE_TOOL {
            return Ok(
                json!({ "error": { "message": format!("there is no tool `{name}`; the only tool is `{INVOKE_TOOL}`") } }),
            );
        }
        let Some(invoke) = &self.invoke else {
            return Ok(json!({ "error": { "message": "this agent cannot run code" } }));
        };
        let code = input.get("code").cloned().unwrap_or(Value::Null);
        let out = self
            .ctx
            .invoke(
                invoke.as_str(),
                json!({ "code": code }),
                InvokeOptions::default(),
            )
            .await?;
        Ok(out.map(|v| (*v).clone()).unwrap_or(Value::Null))
    }
}

/// The loop, stopped (the model call in flight dropped) when the provider's context is
/// aborted: by `agentSignal` when the agent fails, or by its pipeline's cancellation.
async fn until_aborted(ctx: Context, args: Arc<Value>) -> Result<Option<Value>> {
    let signal = ctx.signal();
    tokio::select! {
        biased;
        () = signal.cancelled() => Err(ctx.abort_error().unwrap_or_else(|| {
            SkillError::new(ErrorKind::Aborted, "aborted")
        })),
        outcome = run(ctx.clone(), args) => outcome,
    }
}

async fn run(ctx: Context, args: Arc<Value>) -> Result<Option<Value>> {
    let config = AgentConfig::parse(args.get("config").unwrap_or(&Value::Null))?;
    let provider = select::provider_for(&config, &|name| std::env::var(name).ok())?;
    let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_string);
    let prompt = text("prompt").unwrap_or_default();
    let agent = Loop {
        ctx: ctx.clone(),
        hook: text("hookRef"),
        invoke: text("invokeRef"),
    };
    // The conversation and its turn, as the policy found them (spec 04): each model call of
    // this run is one call of that turn.
    let conversation = ctx.get("nonlocals.agent")?.unwrap_or(Value::Null);
    let session_id = conversation
        .get("sessionId")
        .and_then(Value::as_str)
        .map_or_else(|| ctx.root_id(), str::to_string);
    let turn_index = conversation
        .get("turnIndex")
        .and_then(Value::as_u64)
        .map_or(0, |t| u32::try_from(t).unwrap_or(u32::MAX));
    let agent_name = text("skillName").unwrap_or_else(|| ctx.tool_name().to_string());
    let mut messages = vec![
        Message::system(prompt.clone()),
        Message::user(text("userMessage").unwrap_or_else(|| "Execute the task.".into())),
    ];
    let tools = if agent.invoke.is_some() {
        vec![invoke_def()]
    } else {
        Vec::new()
    };
    let policy = RetryPolicy {
        retries: config.retries,
        ..RetryPolicy::default()
    };
    let mut last_input_tokens = 0;
    let mut turn: u32 = 0;
    loop {
        turn += 1;
        agent
            .report(json!({ "type": "turn-start", "turnNumber": turn }))
            .await?;
        if config.context_edit
            && let Some(cleared) =
                context_edit::edit(&mut messages, last_input_tokens, config.context_window)
        {
            agent
                .report(json!({ "type": "context-edit", "cleared": cleared }))
                .await?;
        }
        let request = ModelRequest {
            model: config.model.clone(),
            messages: messages.clone(),
            tools: tools.clone(),
            temperature: config.temperature,
            max_tokens: config.max_tokens,
        };
        let info = CallInfo {
            config: &config,
            turn_index,
            call_index: turn - 1,
            session_id: &session_id,
            agent_name: &agent_name,
            instructions: &prompt,
        };
        let response = call_with_events(&agent, &provider, policy, request, info).await?;
        last_input_tokens = response.usage.input_tokens + response.usage.output_tokens;
        if !response.text.is_empty() {
            agent
                .report(json!({ "type": "message", "text": response.text }))
                .await?;
        }
        messages.push(Message::assistant(
            response.text.clone(),
            response.tool_calls.clone(),
        ));
        for call in &response.tool_calls {
            let directive = agent
                .report(json!({ "type": "tool-call", "tool": call.name, "args": call.input, "id": call.id }))
                .await?;
            let result = match directive.as_ref().and_then(|d| d.get("deny")) {
                Some(reason) => {
                    json!({ "error": { "message": format!("denied: {}", reason.as_str().unwrap_or("by the agent's hook")) } })
                }
                None => agent.run_tool(&call.name, &call.input).await?,
            };
            let mut report = json!({ "type": "tool-result", "tool": call.name, "args": call.input, "result": result });
            if let Some(error) = result.get("error") {
                report["error"] = error.clone();
            }
            agent.report(report).await?;
            messages.push(Message::tool_result(call.id.clone(), render(&result)));
        }
        let directive = agent
            .report(json!({
                "type": "turn-end",
                "result": response.text,
                "turnNumber": turn,
                "toolCalls": response.tool_calls.len(),
                "usage": response.usage,
                "stop": response.stop,
            }))
            .await?;
        match directive {
            Some(d) if d.get("stop") == Some(&Value::Bool(true)) => {
                return Ok(Some(
                    d.get("result")
                        .cloned()
                        .unwrap_or_else(|| Value::String(response.text)),
                ));
            }
            Some(d) if d.get("continue") == Some(&Value::Bool(true)) => {
                if let Some(message) = d.get("message").and_then(Value::as_str) {
                    messages.push(Message::user(message));
                } else if response.tool_calls.is_empty() {
                    messages.push(Message::user("Continue."));
                }
            }
            _ if response.tool_calls.is_empty() => return Ok(Some(Value::String(response.text))),
            _ => {}
        }
    }
}

/// One model call with its streamed pieces and retries reported as they happen, and failed
/// calls offered to the hook (which may ask to try again after a wait).
async fn call_with_events(
    agent: &Loop,
    provider: &Arc<dyn crate::agent::provider::Provider>,
    policy: RetryPolicy,
    request: ModelRequest,
    info: CallInfo<'_>,
) -> Result<ModelResponse> {
    let mut attempt: u64 = 0;
    loop {
        let (delta_tx, mut delta_rx) = mpsc::unbounded_channel();
        let (retry_tx, mut retry_rx) = mpsc::unbounded_channel();
        let env = Arc::new(CallEnv {
            provider: provider.clone(),
            policy,
            deltas: delta_tx,
            retries: retry_tx,
        });
        let call = model_call::call(&agent.ctx, env, request.clone(), info).fuse();
        futures::pin_mut!(call);
        let outcome = loop {
            tokio::select! {
                biased;
                Some(delta) = delta_rx.recv() => report_delta(agent, delta).await?,
                Some((n, error, wait)) = retry_rx.recv() => {
                    agent.report(json!({ "type": "retry", "attempt": n, "error": error, "wait": wait.as_millis() as u64 })).await?;
                }
                outcome = &mut call => break outcome,
            }
        };
        // Pieces sent just before the call ended.
        while let Ok(delta) = delta_rx.try_recv() {
            report_delta(agent, delta).await?;
        }
        let err = match outcome {
            Ok(response) => return Ok(response),
            Err(err) if is_model_error(&err) => err,
            Err(err) => return Err(err),
        };
        attempt += 1;
        let directive = agent
            .report(json!({ "type": "error", "error": err.message(), "attempt": attempt }))
            .await?;
        match directive {
            Some(d) if d.get("retry") == Some(&Value::Bool(true)) => {
                let wait = d.get("wait").and_then(Value::as_u64).unwrap_or(1_000);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            _ => return Err(err),
        }
    }
}

async fn report_delta(agent: &Loop, delta: Delta) -> Result<()> {
    let event = match delta {
        Delta::Text(text) => json!({ "type": "message", "text": text, "delta": true }),
        Delta::Reasoning(text) => json!({ "type": "reasoning", "text": text, "delta": true }),
    };
    agent.report(event).await.map(drop)
}

fn is_model_error(err: &SkillError) -> bool {
    err.kind() == ErrorKind::Failed
        && err
            .data()
            .is_some_and(|d| d.get("rule").and_then(Value::as_str) == Some("model-error"))
}

/// A tool result as the text the model reads.
fn render(result: &Value) -> String {
    match result {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
