//! Anthropic Messages (`POST {base}/v1/messages`, `x-api-key`, `anthropic-version`): system
//! text apart from the turns, content blocks (`text`, `tool_use`, `tool_result`), tool results
//! sent as the user's turn. Streamed as named events (`message_start`, `content_block_start`,
//! `content_block_delta` with text, JSON fragments or thinking, `message_delta` with the stop
//! reason and usage, `message_stop`, `error`). Base URL and key default to
//! `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`.

use std::time::Duration;

use serde_json::{Value, json};

use super::answer::Answer;
use super::wire::{Endpoint, Flow, Wire, clip, push_turn};
use super::{
    Answered, Delta, Message, ModelRequest, OnDelta, Provider, ProviderError, Role, StopReason,
};

const NAME: &str = "anthropic";
/// Anthropic's own endpoint, when `ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_BASE: &str = "https://api.anthropic.com";
/// The API version the requests are written for.
const VERSION: &str = "2023-06-01";
/// The API requires `max_tokens`; this when the skill gives none.
const DEFAULT_MAX_TOKENS: u32 = 4096;

#[derive(Debug, Clone)]
pub struct Anthropic {
    endpoint: Endpoint,
}

impl Anthropic {
    pub fn new(base: &str, key: Option<String>, timeout: Duration) -> Anthropic {
        Anthropic {
            endpoint: Endpoint::new(base, key, timeout).key_in("x-api-key"),
        }
    }

    /// `ANTHROPIC_BASE_URL` (else Anthropic's) and `ANTHROPIC_API_KEY`, read through `env`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>, timeout: Duration) -> Anthropic {
        Anthropic {
            endpoint: Endpoint::from_env(
                env,
                "ANTHROPIC_BASE_URL",
                DEFAULT_BASE,
                "ANTHROPIC_API_KEY",
                timeout,
            )
            .key_in("x-api-key"),
        }
    }

    pub fn base(&self) -> &str {
        &self.endpoint.base
    }

    fn body(request: &ModelRequest) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let mut body = json!({
            "model": request.model,
            "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": turns(&request.messages),
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.schema }))
                .collect();
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        body
    }
}

/// The conversation as alternating user and assistant turns: tool results become the user's
/// turn (several in a row share one), system messages are left to `system`.
fn turns(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<Value> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => ("user", vec![json!({ "type": "text", "text": m.content })]),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id,
                    "content": m.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({ "type": "text", "text": m.content }));
                }
                for call in &m.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use", "id": call.id, "name": call.name, "input": call.input,
                    }));
                }
                ("assistant", blocks)
            }
        };
        push_turn(&mut turns, role, blocks);
    }
    turns
}

#[async_trait::async_trait]
impl Provider for Anthropic {
    async fn call(&self, request: &ModelRequest, on_delta: OnDelta<'_>) -> Answered {
        let body = Anthropic::body(request);
        let wire = self.endpoint.wire(NAME);
        let post = self.endpoint.post("/v1/messages");
        let post = post.header("anthropic-version", VERSION).json(&body);
        let response = wire.send(post).await?;
        let mut answer = Streamed::default();
        let done = wire
            .events(response, |event| {
                let data: Value = serde_json::from_str(&event.data).map_err(|e| {
                    wire.malformed(format!(
                        "a streamed event is not JSON ({e}): {}",
                        clip(&event.data)
                    ))
                })?;
                let kind = event
                    .event
                    .as_deref()
                    .or_else(|| data["type"].as_str())
                    .unwrap_or_default()
                    .to_string();
                answer.take(&wire, &kind, &data, on_delta)
            })
            .await?;
        if !done {
            return Err(wire.malformed("the stream ended before the answer did"));
        }
        answer.0.finish(&wire)
    }

    fn name(&self) -> &'static str {
        NAME
    }
}

/// An answer being put together from events.
#[derive(Default)]
struct Streamed(Answer);

impl Streamed {
    fn take(
        &mut self,
        wire: &Wire,
        kind: &str,
        data: &Value,
        on_delta: OnDelta<'_>,
    ) -> Result<Flow, ProviderError> {
        match kind {
            "message_start" => {
                let message = &data["message"];
                self.0.model = message["model"].as_str().unwrap_or_default().to_string();
                self.0.usage.input_tokens = message["usage"]["input_tokens"].as_u64().unwrap_or(0);
                self.0.usage.output_tokens =
                    message["usage"]["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let block = &data["content_block"];
                if block["type"] == "tool_use" {
                    self.0.start_call(
                        data["index"].as_u64().unwrap_or(0),
                        block["id"].as_str().unwrap_or_default(),
                        block["name"].as_str().unwrap_or_default(),
                    );
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => {
                        self.0
                            .text(delta["text"].as_str().unwrap_or_default(), on_delta);
                    }
                    "thinking_delta" => {
                        let text = delta["thinking"].as_str().unwrap_or_default();
                        on_delta(Delta::Reasoning(text.to_string()));
                    }
                    "input_json_delta" => {
                        self.0.call_input(
                            wire,
                            data["index"].as_u64().unwrap_or(0),
                            delta["partial_json"].as_str().unwrap_or_default(),
                        )?;
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.0.stop = match reason {
                        "tool_use" => StopReason::ToolUse,
                        "max_tokens" => StopReason::MaxTokens,
                        "refusal" => StopReason::Refused,
                        _ => StopReason::EndTurn,
                    };
                }
                if let Some(n) = data["usage"]["output_tokens"].as_u64() {
                    self.0.usage.output_tokens = n;
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => return Err(wire.streamed_error(&data["error"])),
            _ => {}
        }
        Ok(Flow::More)
    }
}
