//! One agent run as the policy sees it: its config and limits, the counters the limits are
//! checked against, the trace every hook event is written to, and where the events go (the
//! run's event topic, the transport that started the run).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::config::AgentConfig;
use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::events::{Bus, Event};
use crate::gateway::reply::{Reply, ReplyPart};

/// The topic named in agent events sent only to the run's client (no topic configured).
pub const REPLY_TOPIC: &str = "agent";

/// Reminders sent for a missing or wrong structured result before the run fails.
pub const MAX_REMINDERS: u32 = 3;

pub(crate) struct AgentRun {
    pub config: AgentConfig,
    /// The context whose skill asked for the agent: the trace goes to its `locals.agent`.
    pub served: Context,
    /// The `agent` skill's own context (events, logs).
    pub ctx: Context,
    /// The `returns` schema and its validator.
    pub returns: Option<(Value, Arc<jsonschema::Validator>)>,
    /// The topic agent events go to.
    pub topic: Option<String>,
    /// The transport that started the run, if one did (looked up once: every token goes there).
    pub reply: Option<Arc<Reply>>,
    pub name: String,
    /// `agentSignal` (spec 05): cancelled when the run fails (a limit, the hook's refusal, the
    /// wall clock) or its pipeline is aborted; the provider's context is aborted with it.
    pub signal: CancellationToken,
    pub state: Mutex<RunState>,
}

#[derive(Default)]
pub(crate) struct RunState {
    pub trace: Vec<Value>,
    /// Code runs so far.
    pub steps: u32,
    pub steps_exhausted: bool,
    pub turns: u32,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// A result the code gave with `ctx.manager.finish` (and that matched `returns`).
    pub finished: Option<Value>,
    pub reminders: u32,
    /// Why the run failed, once it has: what the agent answers whatever the provider does next.
    pub failure: Option<SkillError>,
}

impl AgentRun {
    /// Adds an event to the trace (`{type, timestamp, ...fields}`) and sends it on.
    pub async fn record(&self, kind: &str, fields: Value) {
        let mut entry = Map::new();
        entry.insert("type".into(), Value::String(kind.to_string()));
        entry.insert("timestamp".into(), json!(now_ms()));
        if let Value::Object(fields) = fields {
            entry.extend(fields);
        }
        let entry = Value::Object(entry);
        self.state.lock().trace.push(entry.clone());
        self.publish(kind, entry).await;
    }

    /// Streams model text to the transport that started the run, if one did.
    pub fn stream_text(&self, text: &str) {
        if let Some(reply) = &self.reply {
            reply.offer(ReplyPart::Partial(text.to_string()));
        }
    }

    /// Emits an agent event (`agent-message`, `tool-call`, ...) to the run's topic. Without a
    /// topic, a run started by a transport still sends it to its client (an SSE `event`, a
    /// WebSocket frame), not durably; text pieces go there as the answer's chunks instead.
    pub async fn emit(&self, kind: &str, data: Value) {
        let piece = data.get("delta") == Some(&Value::Bool(true));
        let reply_only = match (&self.topic, &self.reply) {
            (Some(_), _) => None,
            (None, Some(reply)) if !piece => Some(reply),
            (None, _) => return,
        };
        let topic = self.topic.as_deref().unwrap_or(REPLY_TOPIC);
        let mut event = Event::new(topic, kind);
        event.source = Some(self.name.clone());
        event.root_context_id = Some(self.ctx.root_id());
        event.data = Some(data);
        if let Some(reply) = reply_only {
            reply.offer(ReplyPart::Event(event.to_json()));
            return;
        }
        let Some(bus) = self.ctx.kernel().extension::<Bus>() else {
            return;
        };
        if let Err(err) = bus.emit(&event).await {
            tracing::warn!(topic = %topic, error = %err, "an agent event could not be emitted");
        }
    }

    /// The spec's event names for the trace entries that have one.
    async fn publish(&self, kind: &str, entry: Value) {
        let name = match kind {
            "turn-start" | "turn-end" | "tool-call" | "tool-result" => kind,
            "message" => "agent-message",
            "error" => "agent-error",
            _ => return,
        };
        let name = if kind == "tool-result" && entry.get("error").is_some() {
            "tool-error"
        } else {
            name
        };
        self.emit(name, entry).await;
    }

    /// Writes the trace to the served context's `locals.agent.trace`.
    pub fn save_trace(&self) {
        let trace = std::mem::take(&mut self.state.lock().trace);
        let agent = json!({ "trace": trace });
        if let Err(err) = self.served.set("locals.agent", agent) {
            tracing::debug!(error = %err, "the agent trace could not be saved");
        }
    }

    /// Fails the run with `err`: records it (the first failure wins) and aborts `agentSignal`,
    /// so the provider stops calling the model.
    pub fn fail(&self, err: SkillError) -> SkillError {
        self.state.lock().failure.get_or_insert_with(|| err.clone());
        self.signal.cancel();
        err
    }

    /// The failure recorded by [`AgentRun::fail`], if any.
    pub fn failure(&self) -> Option<SkillError> {
        self.state.lock().failure.clone()
    }

    /// The error for a limit reached.
    pub fn limit(&self, name: &str, value: impl std::fmt::Display, detail: &str) -> SkillError {
        SkillError::new(
            ErrorKind::Failed,
            format!("the agent reached its {name} limit ({value}): {detail}"),
        )
        .with_data(json!({ "rule": "agent-limit", "limit": name }))
    }

    /// Checks the token budget after a call.
    pub fn add_usage(&self, usage: &Value) -> Result<()> {
        let tokens_in = usage
            .get("inputTokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let tokens_out = usage
            .get("outputTokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let total = {
            let mut state = self.state.lock();
            state.tokens_in += tokens_in;
            state.tokens_out += tokens_out;
            state.tokens_in + state.tokens_out
        };
        match self.config.token_budget {
            Some(budget) if total > budget => Err(self.limit(
                "tokenBudget",
                budget,
                &format!("{total} tokens used in and out"),
            )),
            _ => Ok(()),
        }
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
