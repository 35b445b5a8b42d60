//! What the HTTP model APIs share: where the API is and its key ([`Endpoint`], the key never
//! printed), sending with a timeout, reading an error status into a
//! [`ProviderError`] (their bodies all say `{"error": {"message", "type" or "code"}}`),
//! `Retry-After`, and reading an event stream with a timeout between chunks.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::ProviderError;
use super::sse::{SseDecoder, SseEvent};

/// A vendor's API: its base URL, its key, the timeout of its calls.
#[derive(Clone)]
pub(super) struct Endpoint {
    pub http: reqwest::Client,
    pub base: String,
    pub key: Option<String>,
    /// The header the key goes in, as is; without one it is a bearer token.
    pub key_header: Option<&'static str>,
    /// Longest wait for the answer to start, and between two streamed chunks.
    pub timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base", &self.base)
            .field("key", &self.key.as_ref().map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Endpoint {
    pub fn new(base: &str, key: Option<String>, timeout: Duration) -> Endpoint {
        crate::tls::install();
        Endpoint {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_string(),
            key,
            key_header: None,
            timeout,
        }
    }

    /// The key sent as is in `header` (`x-api-key`) instead of as a bearer token.
    pub fn key_in(mut self, header: &'static str) -> Endpoint {
        self.key_header = Some(header);
        self
    }

    /// The base URL from `base_var` (else `default`) and the key from `key_var`.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        base_var: &str,
        default: &str,
        key_var: &str,
        timeout: Duration,
    ) -> Endpoint {
        let base = env(base_var).unwrap_or_else(|| default.into());
        Endpoint::new(&base, env(key_var), timeout)
    }

    /// A POST to `path` under the base URL, with the key.
    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let post = self.http.post(format!("{}{path}", self.base));
        match (&self.key, self.key_header) {
            (None, _) => post,
            (Some(key), None) => post.bearer_auth(key),
            (Some(key), Some(header)) => post.header(header, key),
        }
    }

    pub fn wire(&self, name: &'static str) -> Wire {
        Wire {
            name,
            timeout: self.timeout,
        }
    }
}

/// One vendor's side of the wire.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wire {
    pub name: &'static str,
    /// Longest wait for the answer to start, and between two streamed chunks.
    pub timeout: Duration,
}

/// Whether an event stream reached its end marker.
pub(super) enum Flow {
    More,
    Done,
}

impl Wire {
    /// Sends `request`; a status of 400 or more is the error it means.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ProviderError> {
        let response = tokio::time::timeout(self.timeout, request.send())
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| self.network(e))?;
        let status = response.status().as_u16();
        if status < 400 {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        let body = tokio::time::timeout(self.timeout, response.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Err(self.refusal(status, &body, retry_after))
    }

    /// A whole JSON answer.
    pub async fn json(&self, response: reqwest::Response) -> Result<Value, ProviderError> {
        let body = tokio::time::timeout(self.timeout, response.bytes())
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| self.network(e))?;
        serde_json::from_slice(&body)
            .map_err(|e| self.malformed(format!("the answer is not JSON: {e}")))
    }

    /// Hands each event of a streamed answer to `each` until it says [`Flow::Done`] or the
    /// body ends; whether it was done.
    pub async fn events(
        &self,
        response: reqwest::Response,
        mut each: impl FnMut(SseEvent) -> Result<Flow, ProviderError>,
    ) -> Result<bool, ProviderError> {
        let mut chunks = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        loop {
            let chunk = tokio::time::timeout(self.timeout, chunks.next())
                .await
                .map_err(|_| self.timed_out())?;
            let (events, ended) = match chunk {
                Some(chunk) => {
                    let chunk = chunk.map_err(|e| self.network(e))?;
                    (decoder.push(&chunk).map_err(|e| self.malformed(e))?, false)
                }
                None => (decoder.finish().into_iter().collect(), true),
            };
            for event in events {
                if let Flow::Done = each(event)? {
                    return Ok(true);
                }
            }
            if ended {
                return Ok(false);
            }
        }
    }

    /// The error a status of 400 or more means.
    pub fn refusal(&self, status: u16, body: &str, retry_after: Option<Duration>) -> ProviderError {
        let provider = self.name;
        let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let error = &parsed["error"];
        let message = error["message"]
            .as_str()
            .or_else(|| parsed["message"].as_str())
            .or_else(|| error.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| clip(body));
        let code = error["code"]
            .as_str()
            .or_else(|| error["type"].as_str())
            .unwrap_or_default();
        match status {
            401 | 403 => ProviderError::Unauthorized { provider, message },
            429 => ProviderError::RateLimited {
                provider,
                message,
                retry_after,
            },
            400 | 413 if code == "context_length_exceeded" || too_long(&message) => {
                ProviderError::ContextLength { provider, message }
            }
            500.. => ProviderError::Server {
                provider,
                status,
                message,
                retry_after,
            },
            _ => ProviderError::Request {
                provider,
                status,
                message,
            },
        }
    }

    pub fn timed_out(&self) -> ProviderError {
        ProviderError::Timeout {
            provider: self.name,
            after: self.timeout,
        }
    }

    pub fn network(&self, err: reqwest::Error) -> ProviderError {
        ProviderError::Network {
            provider: self.name,
            message: err.to_string(),
        }
    }

    pub fn malformed(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Malformed {
            provider: self.name,
            message: message.into(),
        }
    }

    /// An error the server put in the stream (`{"error": {...}}` or an `error` event).
    pub fn streamed_error(&self, error: &Value) -> ProviderError {
        let message = error["message"]
            .as_str()
            .unwrap_or("an error in the stream")
            .to_string();
        let kind = error["type"].as_str().unwrap_or_default();
        if too_long(&message) {
            return ProviderError::ContextLength {
                provider: self.name,
                message,
            };
        }
        let status = match kind {
            "rate_limit_error" => {
                return ProviderError::RateLimited {
                    provider: self.name,
                    message,
                    retry_after: None,
                };
            }
            "overloaded_error" => 529,
            _ => 500,
        };
        ProviderError::Server {
            provider: self.name,
            status,
            message,
            retry_after: None,
        }
    }
}

/// Whether a vendor's message says the conversation does not fit the model's window.
fn too_long(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    [
        "context length",
        "context window",
        "maximum context",
        "prompt is too long",
        "input is too long",
        "too many tokens",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// `retry-after-ms` (OpenAI), else `Retry-After` in seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    text("retry-after")
        .and_then(|v| v.parse::<f64>().ok())
        .map(|s| Duration::from_secs_f64(s.max(0.0)))
}

/// At most 200 characters of `text`, for an error message.
pub(super) fn clip(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Tool call input as the model wrote it: JSON text (empty means `{}`).
pub(super) fn tool_input(wire: &Wire, name: &str, args: &str) -> Result<Value, ProviderError> {
    if args.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(args).map_err(|e| {
        wire.malformed(format!(
            "the arguments of tool call `{name}` are not JSON ({e}): {}",
            clip(args)
        ))
    })
}

/// Appends a turn, or joins it to the last one when that has the same role (vendors that want
/// user and assistant turns to alternate: tool results join the user's turn).
pub(super) fn push_turn(turns: &mut Vec<Value>, role: &str, blocks: Vec<Value>) {
    match turns.last_mut() {
        Some(last) if last["role"] == role => {
            if let Some(content) = last["content"].as_array_mut() {
                content.extend(blocks);
            }
        }
        _ => turns.push(serde_json::json!({ "role": role, "content": blocks })),
    }
}
