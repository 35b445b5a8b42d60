//! OpenAI-compatible Chat Completions (`POST {base}/chat/completions`): OpenAI, vLLM, Ollama,
//! LM Studio and the like. Streamed (`stream: true`, server-sent `data:` chunks ending with
//! `[DONE]`, usage in the last chunk) or whole; tools as `function` tools, their calls streamed
//! in fragments by index. Base URL and key default to `OPENAI_BASE_URL` and `OPENAI_API_KEY`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::wire::{Endpoint, Flow, Wire, clip, tool_input};
use super::{
    Answered, Delta, Message, ModelRequest, ModelResponse, OnDelta, Provider, ProviderError, Role,
    StopReason, ToolCall, Usage,
};

const NAME: &str = "openai";
/// OpenAI's own endpoint, when `OPENAI_BASE_URL` is not set.
pub const DEFAULT_BASE: &str = "https://api.openai.com/v1";

/// A Chat Completions endpoint.
#[derive(Debug, Clone)]
pub struct OpenAi {
    endpoint: Endpoint,
    stream: bool,
}

impl OpenAi {
    /// Where requests go (`…/v1`).
    pub fn base(&self) -> &str {
        &self.endpoint.base
    }

    pub fn new(base: &str, key: Option<String>, timeout: Duration) -> OpenAi {
        OpenAi {
            endpoint: Endpoint::new(base, key, timeout),
            stream: true,
        }
    }

    /// `OPENAI_BASE_URL` (else OpenAI's) and `OPENAI_API_KEY`, read through `env`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>, timeout: Duration) -> OpenAi {
        OpenAi {
            endpoint: Endpoint::from_env(
                env,
                "OPENAI_BASE_URL",
                DEFAULT_BASE,
                "OPENAI_API_KEY",
                timeout,
            ),
            stream: true,
        }
    }

    /// Asks for the whole answer at once instead of a stream.
    pub fn whole(mut self) -> OpenAi {
        self.stream = false;
        self
    }

    fn body(&self, request: &ModelRequest) -> Value {
        let mut body = json!({
            "model": request.model,
            "messages": request.messages.iter().map(message).collect::<Vec<_>>(),
            "stream": self.stream,
        });
        if self.stream {
            body["stream_options"] = json!({ "include_usage": true });
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.schema,
                        }
                    })
                })
                .collect();
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(n) = request.max_tokens {
            body["max_tokens"] = json!(n);
        }
        body
    }
}

/// A message in the wire form.
fn message(m: &Message) -> Value {
    match m.role {
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id,
            "content": m.content,
        }),
        Role::Assistant if !m.tool_calls.is_empty() => json!({
            "role": "assistant",
            "content": if m.content.is_empty() { Value::Null } else { Value::from(m.content.as_str()) },
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.input.to_string() },
            })).collect::<Vec<_>>(),
        }),
        role => json!({ "role": role, "content": m.content }),
    }
}

#[async_trait::async_trait]
impl Provider for OpenAi {
    async fn call(&self, request: &ModelRequest, on_delta: OnDelta<'_>) -> Answered {
        let wire = self.endpoint.wire(NAME);
        let post = self
            .endpoint
            .post("/chat/completions")
            .json(&self.body(request));
        let response = wire.send(post).await?;
        if !self.stream {
            return whole(&wire, &wire.json(response).await?, on_delta);
        }
        let mut answer = Streamed::default();
        let done = wire
            .events(response, |event| {
                if event.data == "[DONE]" {
                    return Ok(Flow::Done);
                }
                let chunk: Value = serde_json::from_str(&event.data).map_err(|e| {
                    wire.malformed(format!(
                        "a streamed chunk is not JSON ({e}): {}",
                        clip(&event.data)
                    ))
                })?;
                answer.take(&wire, &chunk, on_delta)?;
                Ok(Flow::More)
            })
            .await?;
        // Some servers close without `[DONE]` after the last chunk.
        if done || answer.stop.is_some() {
            return answer.finish(&wire);
        }
        Err(wire.malformed("the stream ended before the answer did"))
    }

    fn name(&self) -> &'static str {
        NAME
    }
}

/// An answer being put together from chunks.
#[derive(Default)]
struct Streamed {
    text: String,
    /// Tool calls by their index in the stream.
    calls: BTreeMap<u64, (String, String, String)>,
    usage: Usage,
    stop: Option<StopReason>,
    model: String,
}

impl Streamed {
    fn take(
        &mut self,
        wire: &Wire,
        chunk: &Value,
        on_delta: OnDelta<'_>,
    ) -> Result<(), ProviderError> {
        if let Some(error) = chunk.get("error") {
            return Err(wire.streamed_error(error));
        }
        if let Some(model) = chunk["model"].as_str() {
            self.model = model.to_string();
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = usage_of(usage);
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return Ok(());
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.text.push_str(text);
            on_delta(Delta::Text(text.to_string()));
        }
        if let Some(text) = delta["reasoning_content"]
            .as_str()
            .filter(|t| !t.is_empty())
        {
            on_delta(Delta::Reasoning(text.to_string()));
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for call in calls {
                let index = call["index"].as_u64().unwrap_or(0);
                let entry = self.calls.entry(index).or_default();
                if let Some(id) = call["id"].as_str() {
                    entry.0 = id.to_string();
                }
                if let Some(name) = call["function"]["name"].as_str() {
                    entry.1.push_str(name);
                }
                if let Some(args) = call["function"]["arguments"].as_str() {
                    entry.2.push_str(args);
                }
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.stop = Some(stop_reason(reason));
        }
        Ok(())
    }

    fn finish(self, wire: &Wire) -> Result<ModelResponse, ProviderError> {
        let tool_calls = self
            .calls
            .into_values()
            .enumerate()
            .map(|(n, (id, name, args))| tool_call(wire, n, id, name, &args))
            .collect::<Result<Vec<_>, _>>()?;
        let stop = match self.stop {
            Some(stop) => stop,
            None if !tool_calls.is_empty() => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        Ok(ModelResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
            stop,
            model: self.model,
            retries: 0,
        })
    }
}

/// A whole (not streamed) answer.
fn whole(wire: &Wire, body: &Value, on_delta: OnDelta<'_>) -> Result<ModelResponse, ProviderError> {
    let choice = body["choices"]
        .get(0)
        .ok_or_else(|| wire.malformed("the answer has no choices"))?;
    let message = &choice["message"];
    let text = message["content"].as_str().unwrap_or_default().to_string();
    if !text.is_empty() {
        on_delta(Delta::Text(text.clone()));
    }
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(n, c)| {
            tool_call(
                wire,
                n,
                c["id"].as_str().unwrap_or_default().to_string(),
                c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                c["function"]["arguments"].as_str().unwrap_or("{}"),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ModelResponse {
        text,
        tool_calls,
        usage: usage_of(&body["usage"]),
        stop: stop_reason(choice["finish_reason"].as_str().unwrap_or("stop")),
        model: body["model"].as_str().unwrap_or_default().to_string(),
        retries: 0,
    })
}

fn tool_call(
    wire: &Wire,
    n: usize,
    id: String,
    name: String,
    args: &str,
) -> Result<ToolCall, ProviderError> {
    if name.is_empty() {
        return Err(wire.malformed(format!("tool call {n} has no name")));
    }
    let input = tool_input(wire, &name, args)?;
    let id = if id.is_empty() {
        format!("call_{n}")
    } else {
        id
    };
    Ok(ToolCall { id, name, input })
}

fn usage_of(usage: &Value) -> Usage {
    Usage {
        input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refused,
        _ => StopReason::EndTurn,
    }
}
