//! Amazon Bedrock's Converse API: `POST /model/{id}/converse-stream` (or `/converse` for the
//! whole answer), signed with SigV4 (`aws-sigv4`) from the standard AWS variables, answered as
//! an AWS event stream (binary frames, `aws-smithy-eventstream`) of `messageStart`,
//! `contentBlockStart/Delta/Stop`, `messageStop` and `metadata` events, or exception frames.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use bytes::BytesMut;
use futures::StreamExt;
use serde_json::{Value, json};

use super::answer::Answer;
use super::wire::{Endpoint, Wire, clip, push_turn};
use super::{
    Answered, Delta, Message, ModelRequest, ModelResponse, OnDelta, Provider, ProviderError, Role,
    StopReason, ToolCall, Usage,
};
use crate::agent::config::AgentConfig;
use crate::error::{Result, SkillError};

const NAME: &str = "bedrock";

/// Where a Bedrock client connects and who it signs as. The secret never prints.
#[derive(Clone)]
pub struct Settings {
    /// `https://bedrock-runtime.{region}.amazonaws.com`, or the endpoint override.
    pub endpoint: String,
    pub region: String,
    pub access_key: String,
    secret_key: String,
    session_token: Option<String>,
    pub timeout: Duration,
    pub stream: bool,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("timeout", &self.timeout)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// From the config and the AWS variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`), and the endpoint from
    /// `base-url`, `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` or `AWS_ENDPOINT_URL`.
    pub fn from_env(
        config: &AgentConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings> {
        let region = config
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .ok_or_else(|| {
                SkillError::config(
                    "bedrock needs a region: set metadata.model.region or AWS_REGION",
                )
            })?;
        let (Some(access_key), Some(secret_key)) =
            (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
        else {
            return Err(SkillError::config(
                "bedrock needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)",
            ));
        };
        let endpoint = config
            .base_url
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME"))
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .unwrap_or_else(|| format!("https://bedrock-runtime.{region}.amazonaws.com"));
        Ok(Settings {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            region,
            access_key,
            secret_key,
            session_token: env("AWS_SESSION_TOKEN"),
            timeout: config.request_timeout,
            stream: config.stream,
        })
    }

    /// Tells two credential sets apart (for the client cache) without holding the secret.
    pub fn secret_fingerprint(&self) -> String {
        crate::digest::sha256_hex(
            format!(
                "{}\n{}",
                self.secret_key,
                self.session_token.as_deref().unwrap_or_default()
            )
            .as_bytes(),
        )
    }
}

pub struct Bedrock {
    settings: Settings,
    endpoint: Endpoint,
}

impl Bedrock {
    pub fn new(settings: Settings) -> Bedrock {
        let endpoint = Endpoint::new(&settings.endpoint, None, settings.timeout);
        Bedrock { settings, endpoint }
    }

    /// The Converse request body.
    pub fn body(request: &ModelRequest) -> Value {
        let system: Vec<Value> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| json!({ "text": m.content }))
            .collect();
        let mut body = json!({ "messages": turns(&request.messages) });
        if !system.is_empty() {
            body["system"] = Value::Array(system);
        }
        let mut inference = serde_json::Map::new();
        if let Some(n) = request.max_tokens {
            inference.insert("maxTokens".into(), json!(n));
        }
        if let Some(t) = request.temperature {
            inference.insert("temperature".into(), json!(t));
        }
        if !inference.is_empty() {
            body["inferenceConfig"] = Value::Object(inference);
        }
        if !request.tools.is_empty() {
            body["toolConfig"] = json!({ "tools": request.tools.iter().map(|t| json!({
                "toolSpec": { "name": t.name, "description": t.description, "inputSchema": { "json": t.schema } }
            })).collect::<Vec<_>>() });
        }
        body
    }

    /// The POST with its SigV4 headers.
    fn signed(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> std::result::Result<reqwest::RequestBuilder, ProviderError> {
        let url = format!("{}{path}", self.settings.endpoint);
        let identity = Credentials::new(
            &self.settings.access_key,
            &self.settings.secret_key,
            self.settings.session_token.clone(),
            None,
            "environment",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.settings.region)
            .name("bedrock")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| self.unsigned(e))?
            .into();
        let headers = [("content-type", "application/json")];
        let signable = SignableRequest::new(
            "POST",
            &url,
            headers.iter().copied(),
            SignableBody::Bytes(&body),
        )
        .map_err(|e| self.unsigned(e))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| self.unsigned(e))?
            .into_parts();
        let mut post = self
            .endpoint
            .post(path)
            .header("content-type", "application/json");
        for (name, value) in instructions.headers() {
            post = post.header(name, value);
        }
        Ok(post.body(body))
    }

    fn unsigned(&self, err: impl std::fmt::Display) -> ProviderError {
        ProviderError::Request {
            provider: NAME,
            status: 0,
            message: format!("the request could not be signed: {err}"),
        }
    }
}

/// The model id as one path segment (ids hold `:`, and ARNs `/`).
fn model_path(model: &str, action: &str) -> String {
    let id: String = model
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect();
    format!("/model/{id}/{action}")
}

/// The conversation as alternating user and assistant turns (tool results are the user's).
fn turns(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<Value> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => ("user", vec![json!({ "text": m.content })]),
            Role::Tool => (
                "user",
                vec![json!({ "toolResult": {
                    "toolUseId": m.tool_call_id,
                    "content": [{ "text": m.content }],
                } })],
            ),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({ "text": m.content }));
                }
                for call in &m.tool_calls {
                    blocks.push(json!({ "toolUse": {
                        "toolUseId": call.id, "name": call.name, "input": call.input,
                    } }));
                }
                ("assistant", blocks)
            }
        };
        push_turn(&mut turns, role, blocks);
    }
    turns
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "content_filtered" | "guardrail_intervened" => StopReason::Refused,
        _ => StopReason::EndTurn,
    }
}

#[async_trait::async_trait]
impl Provider for Bedrock {
    async fn call(&self, request: &ModelRequest, on_delta: OnDelta<'_>) -> Answered {
        let wire = self.endpoint.wire(NAME);
        let body = serde_json::to_vec(&Bedrock::body(request)).unwrap_or_default();
        let action = if self.settings.stream {
            "converse-stream"
        } else {
            "converse"
        };
        let post = self.signed(&model_path(&request.model, action), body)?;
        let response = wire.send(post).await?;
        if !self.settings.stream {
            let value = wire.json(response).await?;
            return whole(&wire, &value, &request.model, on_delta);
        }
        let mut answer = Streamed::new(wire, &request.model);
        let mut chunks = response.bytes_stream();
        let mut buffer = BytesMut::new();
        let mut decoder = MessageFrameDecoder::new();
        loop {
            let chunk = tokio::time::timeout(wire.timeout, chunks.next())
                .await
                .map_err(|_| wire.timed_out())?;
            let Some(chunk) = chunk else {
                return Err(wire.malformed("the stream ended before the answer did"));
            };
            buffer.extend_from_slice(&chunk.map_err(|e| wire.network(e))?);
            loop {
                let frame = decoder
                    .decode_frame(&mut buffer)
                    .map_err(|e| wire.malformed(format!("not an AWS event stream: {e}")))?;
                let DecodedFrame::Complete(message) = frame else {
                    break;
                };
                let header = |name: &str| {
                    message
                        .headers()
                        .iter()
                        .find(|h| h.name().as_str() == name)
                        .and_then(|h| h.value().as_string().ok())
                        .map(|s| s.as_str().to_string())
                };
                let payload: Value = serde_json::from_slice(message.payload()).map_err(|e| {
                    wire.malformed(format!(
                        "an event's payload is not JSON ({e}): {}",
                        clip(&String::from_utf8_lossy(message.payload()))
                    ))
                })?;
                if header(":message-type").as_deref() == Some("exception") {
                    let kind = header(":exception-type").unwrap_or_default();
                    return Err(exception(&kind, &payload));
                }
                let kind = header(":event-type").unwrap_or_default();
                answer.take(&kind, &payload, on_delta)?;
                if answer.done {
                    return answer.answer.finish(&wire);
                }
            }
        }
    }

    fn name(&self) -> &'static str {
        NAME
    }
}

/// An exception frame in the stream.
fn exception(kind: &str, payload: &Value) -> ProviderError {
    let message = payload["message"]
        .as_str()
        .or_else(|| payload["Message"].as_str())
        .unwrap_or(kind)
        .to_string();
    match kind {
        "throttlingException" => ProviderError::RateLimited {
            provider: NAME,
            message,
            retry_after: None,
        },
        "validationException" if message.to_ascii_lowercase().contains("too long") => {
            ProviderError::ContextLength {
                provider: NAME,
                message,
            }
        }
        "validationException" => ProviderError::Request {
            provider: NAME,
            status: 400,
            message,
        },
        _ => ProviderError::Server {
            provider: NAME,
            status: 500,
            message: format!("{kind}: {message}"),
            retry_after: None,
        },
    }
}

/// A `/converse` answer.
fn whole(
    wire: &Wire,
    value: &Value,
    model: &str,
    on_delta: OnDelta<'_>,
) -> std::result::Result<ModelResponse, ProviderError> {
    let content = value["output"]["message"]["content"]
        .as_array()
        .ok_or_else(|| wire.malformed("the answer has no output.message.content"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        if let Some(t) = block["text"].as_str() {
            text.push_str(t);
        }
        if let Some(call) = block.get("toolUse") {
            tool_calls.push(ToolCall {
                id: call["toolUseId"].as_str().unwrap_or_default().to_string(),
                name: call["name"].as_str().unwrap_or_default().to_string(),
                input: call["input"].clone(),
            });
        }
    }
    if !text.is_empty() {
        on_delta(Delta::Text(text.clone()));
    }
    Ok(ModelResponse {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: value["usage"]["inputTokens"].as_u64().unwrap_or(0),
            output_tokens: value["usage"]["outputTokens"].as_u64().unwrap_or(0),
        },
        stop: stop_reason(value["stopReason"].as_str().unwrap_or_default()),
        model: model.to_string(),
        retries: 0,
    })
}

/// An answer being put together from stream events.
struct Streamed {
    wire: Wire,
    answer: Answer,
    stopped: bool,
    done: bool,
}

/// What taking one stream event came to: nothing, or the answer cannot be read.
type Taken = std::result::Result<(), ProviderError>;

impl Streamed {
    fn new(wire: Wire, model: &str) -> Streamed {
        let mut answer = Answer::default();
        answer.model = model.to_string();
        Streamed {
            wire,
            answer,
            stopped: false,
            done: false,
        }
    }

    /// Takes the stream event `kind` with its `data`.
    fn take(&mut self, kind: &str, data: &Value, on_delta: OnDelta<'_>) -> Taken {
        let wire = &self.wire;
        let index = data["contentBlockIndex"].as_u64().unwrap_or(0);
        match kind {
            "contentBlockStart" => {
                if let Some(tool) = data["start"].get("toolUse") {
                    self.answer.start_call(
                        index,
                        tool["toolUseId"].as_str().unwrap_or_default(),
                        tool["name"].as_str().unwrap_or_default(),
                    );
                }
            }
            "contentBlockDelta" => {
                let delta = &data["delta"];
                if let Some(text) = delta["text"].as_str() {
                    self.answer.text(text, on_delta);
                } else if let Some(input) = delta["toolUse"]["input"].as_str() {
                    self.answer.call_input(wire, index, input)?;
                } else if let Some(text) = delta["reasoningContent"]["text"].as_str() {
                    on_delta(Delta::Reasoning(text.to_string()));
                }
            }
            "messageStop" => {
                self.answer.stop = stop_reason(data["stopReason"].as_str().unwrap_or_default());
                self.stopped = true;
            }
            "metadata" => {
                let usage = &data["usage"];
                self.answer.usage.input_tokens = usage["inputTokens"].as_u64().unwrap_or(0);
                self.answer.usage.output_tokens = usage["outputTokens"].as_u64().unwrap_or(0);
                // Usage is the last event; an answer without messageStop is cut short.
                if !self.stopped {
                    return Err(wire.malformed("usage came before the message stopped"));
                }
                self.done = true;
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_are_one_escaped_path_segment() {
        assert_eq!(
            model_path("anthropic.claude-3-haiku-20240307-v1:0", "converse"),
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
        );
        assert_eq!(
            model_path(
                "arn:aws:bedrock:us-east-1:1:inference-profile/x",
                "converse-stream"
            ),
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse-stream"
        );
    }

    #[test]
    fn tool_results_join_the_users_turn_and_system_goes_apart() {
        let body = Bedrock::body(&ModelRequest {
            model: "m".into(),
            messages: vec![
                Message::system("sys"),
                Message::user("hi"),
                Message::assistant(
                    "",
                    vec![ToolCall {
                        id: "t1".into(),
                        name: "invoke".into(),
                        input: json!({"code": "1"}),
                    }],
                ),
                Message::tool_result("t1", "1"),
            ],
            ..ModelRequest::default()
        });
        assert_eq!(body["system"], json!([{ "text": "sys" }]));
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns.len(), 3);
        assert_eq!(turns[1]["content"][0]["toolUse"]["toolUseId"], "t1");
        assert_eq!(
            turns[2]["content"][0]["toolResult"]["content"][0]["text"],
            "1"
        );
    }
}
