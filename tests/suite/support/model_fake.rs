//! A fake model server on a local port (real HTTP), scripted per test: each request takes the
//! next scripted reply (an OpenAI-style event stream, a whole JSON answer, an error status with
//! headers, a stall, or bytes that are not an event stream) and is recorded with its headers
//! and JSON body.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// What the fake answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `text/event-stream` of these `data:` payloads, each its own event.
    Stream(Vec<String>),
    /// 200 with this JSON.
    Json(Value),
    /// This status, these headers, this body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// Nothing for this long, then a 500.
    Stall(Duration),
    /// 200 `text/event-stream` with these raw bytes.
    Raw(String),
    /// 200 `application/vnd.amazon.eventstream`: binary frames of `(event type, payload)`;
    /// an event type starting with `!` is an exception frame of that type.
    Aws(Vec<(String, Value)>),
}

/// One request the fake got.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// The body's bytes as sent (what a signature covers).
    pub raw: Vec<u8>,
}

#[derive(Default)]
struct Inner {
    script: Mutex<VecDeque<Reply>>,
    /// What every request gets once the script is done, if anything.
    always: Option<Reply>,
    requests: Mutex<Vec<Request>>,
    /// Woken at each request.
    asked: tokio::sync::Notify,
}

pub struct ModelFake {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

impl ModelFake {
    pub async fn start(script: Vec<Reply>) -> ModelFake {
        Self::serve(Inner {
            script: Mutex::new(script.into()),
            ..Inner::default()
        })
        .await
    }

    /// A fake that answers every request with `reply`.
    pub async fn always(reply: Reply) -> ModelFake {
        Self::serve(Inner {
            always: Some(reply),
            ..Inner::default()
        })
        .await
    }

    async fn serve(inner: Inner) -> ModelFake {
        let inner = Arc::new(inner);
        let app = Router::new().fallback(answer).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        ModelFake { addr, inner }
    }

    /// The base URL clients are given (`http://127.0.0.1:PORT/v1`).
    pub fn base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.inner.requests.lock().clone()
    }

    /// Waits until the fake has been asked at least once (woken by the request itself).
    pub async fn asked(&self) {
        let wait = async {
            loop {
                let asked = self.inner.asked.notified();
                tokio::pin!(asked);
                asked.as_mut().enable();
                if !self.inner.requests.lock().is_empty() {
                    return;
                }
                asked.await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), wait)
            .await
            .expect("the model was asked");
    }
}

async fn answer(
    State(inner): State<Arc<Inner>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    inner.requests.lock().push(Request {
        path: uri.path().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        raw: body.to_vec(),
    });
    inner.asked.notify_waiters();
    let reply = inner
        .script
        .lock()
        .pop_front()
        .or_else(|| inner.always.clone());
    let Some(reply) = reply else {
        return status(500, &[], "the fake has no more scripted replies".into());
    };
    match reply {
        Reply::Stream(chunks) => {
            let text: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
            event_stream(text)
        }
        Reply::Raw(text) => event_stream(text),
        Reply::Aws(events) => Response::builder()
            .header("content-type", "application/vnd.amazon.eventstream")
            .body(Body::from(aws_frames(&events)))
            .unwrap(),
        Reply::Json(value) => Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(value.to_string()))
            .unwrap(),
        Reply::Status(code, headers, body) => status(code, &headers, body),
        Reply::Stall(wait) => {
            tokio::time::sleep(wait).await;
            status(500, &[], "stalled".into())
        }
    }
}

fn event_stream(text: String) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

fn status(code: u16, headers: &[(&'static str, String)], body: String) -> Response {
    let mut response = Response::builder().status(StatusCode::from_u16(code).unwrap());
    for (name, value) in headers {
        response = response.header(*name, value);
    }
    response.body(Body::from(body)).unwrap()
}

/// OpenAI stream chunks: the text in pieces, then the finish reason and the usage, then `[DONE]`.
pub fn openai_text(pieces: &[&str], input: u64, output: u64) -> Vec<String> {
    let mut chunks: Vec<String> = pieces
        .iter()
        .map(|p| {
            json!({ "model": "fake-1", "choices": [{ "index": 0, "delta": { "content": p } }] })
                .to_string()
        })
        .collect();
    chunks.push(
        json!({ "model": "fake-1", "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] })
            .to_string(),
    );
    chunks.push(
        json!({ "model": "fake-1", "choices": [], "usage": { "prompt_tokens": input, "completion_tokens": output } })
            .to_string(),
    );
    chunks.push("[DONE]".into());
    chunks
}

/// OpenAI stream chunks of one tool call whose JSON arguments come in `fragments`.
pub fn openai_tool_call(id: &str, name: &str, fragments: &[&str]) -> Vec<String> {
    let mut chunks = vec![
        json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
            { "index": 0, "id": id, "type": "function", "function": { "name": name, "arguments": "" } }
        ] } }] })
        .to_string(),
    ];
    for fragment in fragments {
        chunks.push(
            json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
                { "index": 0, "function": { "arguments": fragment } }
            ] } }] })
            .to_string(),
        );
    }
    chunks.push(
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] })
            .to_string(),
    );
    chunks.push("[DONE]".into());
    chunks
}

/// An Anthropic event stream from `(event, data)` pairs.
pub fn anthropic(events: &[(&str, Value)]) -> Reply {
    Reply::Raw(
        events
            .iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect(),
    )
}

/// Anthropic events of a text answer in pieces, with its usage.
pub fn anthropic_text(pieces: &[&str], input: u64, output: u64) -> Reply {
    let mut events = vec![
        (
            "message_start",
            json!({ "type": "message_start", "message": {
            "id": "msg_1", "model": "claude-fake", "role": "assistant", "content": [],
            "usage": { "input_tokens": input, "output_tokens": 1 } } }),
        ),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0,
            "content_block": { "type": "text", "text": "" } }),
        ),
        ("ping", json!({ "type": "ping" })),
    ];
    for piece in pieces {
        events.push((
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0,
            "delta": { "type": "text_delta", "text": piece } }),
        ));
    }
    events.extend([
        (
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        (
            "message_delta",
            json!({ "type": "message_delta",
            "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": output } }),
        ),
        ("message_stop", json!({ "type": "message_stop" })),
    ]);
    anthropic(&events)
}

/// Anthropic events of some text, then one tool call whose input comes in `fragments`.
pub fn anthropic_tool_use(text: &str, id: &str, name: &str, fragments: &[&str]) -> Reply {
    let mut events = vec![
        (
            "message_start",
            json!({ "type": "message_start", "message": {
            "model": "claude-fake", "usage": { "input_tokens": 10, "output_tokens": 1 } } }),
        ),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0,
            "content_block": { "type": "text", "text": "" } }),
        ),
        (
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0,
            "delta": { "type": "text_delta", "text": text } }),
        ),
        (
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 1,
            "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } }),
        ),
    ];
    for fragment in fragments {
        events.push((
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 1,
            "delta": { "type": "input_json_delta", "partial_json": fragment } }),
        ));
    }
    events.extend([
        (
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 1 }),
        ),
        (
            "message_delta",
            json!({ "type": "message_delta",
            "delta": { "stop_reason": "tool_use" }, "usage": { "output_tokens": 20 } }),
        ),
        ("message_stop", json!({ "type": "message_stop" })),
    ]);
    anthropic(&events)
}

/// AWS event stream frames (prelude, headers, payload, CRCs) written by the AWS crate.
fn aws_frames(events: &[(String, Value)]) -> Vec<u8> {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    let mut out = Vec::new();
    for (kind, payload) in events {
        let headers = match kind.strip_prefix('!') {
            Some(exception) => vec![
                Header::new(":message-type", HeaderValue::String("exception".into())),
                Header::new(
                    ":exception-type",
                    HeaderValue::String(exception.to_string().into()),
                ),
            ],
            None => vec![
                Header::new(":message-type", HeaderValue::String("event".into())),
                Header::new(":event-type", HeaderValue::String(kind.clone().into())),
            ],
        };
        let message = Message::new_from_parts(headers, payload.to_string().into_bytes());
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
    }
    out
}

/// Bedrock ConverseStream events of a text answer in pieces, with its usage.
pub fn bedrock_text(pieces: &[&str], input: u64, output: u64) -> Reply {
    let mut events = vec![("messageStart".to_string(), json!({ "role": "assistant" }))];
    for piece in pieces {
        events.push((
            "contentBlockDelta".into(),
            json!({ "contentBlockIndex": 0, "delta": { "text": piece } }),
        ));
    }
    events.extend([
        ("contentBlockStop".into(), json!({ "contentBlockIndex": 0 })),
        ("messageStop".into(), json!({ "stopReason": "end_turn" })),
        (
            "metadata".into(),
            json!({ "usage": { "inputTokens": input, "outputTokens": output, "totalTokens": input + output }, "metrics": { "latencyMs": 1 } }),
        ),
    ]);
    Reply::Aws(events)
}

/// Bedrock ConverseStream events of one tool use whose input comes in `fragments`.
pub fn bedrock_tool_use(id: &str, name: &str, fragments: &[&str]) -> Reply {
    let mut events = vec![
        ("messageStart".to_string(), json!({ "role": "assistant" })),
        (
            "contentBlockStart".into(),
            json!({ "contentBlockIndex": 0, "start": { "toolUse": { "toolUseId": id, "name": name } } }),
        ),
    ];
    for fragment in fragments {
        events.push((
            "contentBlockDelta".into(),
            json!({ "contentBlockIndex": 0, "delta": { "toolUse": { "input": fragment } } }),
        ));
    }
    events.extend([
        ("contentBlockStop".into(), json!({ "contentBlockIndex": 0 })),
        ("messageStop".into(), json!({ "stopReason": "tool_use" })),
        (
            "metadata".into(),
            json!({ "usage": { "inputTokens": 20, "outputTokens": 8 } }),
        ),
    ]);
    Reply::Aws(events)
}
