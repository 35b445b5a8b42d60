//! `Idempotency-Key` on `POST /invoke/{skill}`: the first request with a key runs; the same key
//! with the same skill and body gets the first answer again (status and body) for a day, on any
//! replica, through the store's once-only claims; the same key with another request is refused.
//! A streamed request with a key is resumable (see `resume`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::events::{EventStore, KernelBus, KeyClaim};
use crate::gateway::GatewayError;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;

pub const HEADER: &str = "idempotency-key";
/// Where a reconnecting SSE client says what it saw last.
pub const LAST_EVENT_ID: &str = "last-event-id";
/// Set on an answer that is a replay.
pub const REPLAYED: &str = "idempotent-replayed";
/// How long an answer is replayed.
const KEEP: Duration = Duration::from_secs(24 * 3600);
/// Largest answer kept for replays.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// What to do with a request.
pub enum Begin {
    /// No key: run as usual.
    None,
    /// The key was free: run, then [`Claim::settle`] with the answer.
    Claimed(Claim),
    /// The first request's answer.
    Replay(Response),
    /// A streamed run with this key was started: follow its recorded frames on `topic` (`over`
    /// once the run has ended).
    Resume { topic: String, over: bool },
}

/// A key this request holds.
pub struct Claim {
    key: String,
}

/// Looks the request's key up. A streamed request (`stream`) with a key is recorded so that
/// it can be resumed ([`Begin::Resume`]); `Last-Event-ID` without a key is refused.
pub async fn begin(
    state: &AppState,
    caller: Option<&Caller>,
    skill: &str,
    headers: &HeaderMap,
    body: &[u8],
    stream: bool,
) -> Result<Begin, GatewayError> {
    let Some(value) = headers.get(HEADER) else {
        if stream && headers.contains_key(LAST_EVENT_ID) {
            return Err(GatewayError::BadRequest(
                "`Last-Event-ID` resumes a streamed run started with an `Idempotency-Key`: send the same key (and body) again".into(),
            ));
        }
        return Ok(Begin::None);
    };
    let given = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            GatewayError::BadRequest(
                "`Idempotency-Key` must be 1 to 255 visible ASCII characters".into(),
            )
        })?;
    // Keys are the caller's own: two API keys may choose the same one.
    let owner = match caller {
        Some(Caller::Key(key)) => key.name.as_str(),
        _ => "-",
    };
    let key = format!("http-idempotency:{owner}:{given}");
    let mut digest = Sha256::new();
    digest.update(skill.as_bytes());
    digest.update([0]);
    digest.update(body);
    // A streamed run and a JSON answer are different requests.
    digest.update(if stream {
        &b"\0stream"[..]
    } else {
        &b"\0json"[..]
    });
    let fingerprint = crate::digest::hex(&digest.finalize());
    // While the first run goes on, its claim lasts as long as it may run.
    let running = state.config.timeout + state.config.grace + Duration::from_secs(60);
    let store = state.gateway.kernel.bus().store();
    let found = store
        .claim_key(&key, &fingerprint, running)
        .await
        .map_err(|e| GatewayError::Internal {
            cause: e.to_string(),
            run: None,
        })?;
    match found {
        KeyClaim::Won => Ok(Begin::Claimed(Claim { key })),
        KeyClaim::Held { fingerprint: f, .. } if f != fingerprint => {
            Err(GatewayError::KeyReused(format!(
                "the `Idempotency-Key` `{given}` was used for another request (another skill or body, or streamed where this one is not)"
            )))
        }
        KeyClaim::Held { response, .. } if stream => Ok(Begin::Resume {
            topic: stream_topic(&key),
            over: response.is_some(),
        }),
        KeyClaim::Held { response: None, .. } => Err(GatewayError::InProgress(format!(
            "a request with the `Idempotency-Key` `{given}` has not answered yet; try again shortly"
        ))),
        KeyClaim::Held {
            response: Some(stored),
            ..
        } => replay(&stored, given),
    }
}

/// The reserved topic a streamed run holding `key` records its frames on.
fn stream_topic(key: &str) -> String {
    format!(
        "gateway-stream.{}",
        &crate::digest::sha256_hex(key.as_bytes())[..32]
    )
}

impl Claim {
    /// Where this streamed run records its frames.
    pub fn stream_topic(&self) -> String {
        stream_topic(&self.key)
    }

    /// Marks the streamed run as over: later requests with the key follow its recorded frames.
    pub async fn settle_stream(self, store: &Arc<dyn EventStore>) {
        let kept = json!({ "stream": true }).to_string();
        if let Err(err) = store.settle_key(&self.key, &kept, KEEP).await {
            tracing::warn!(error = %err, "marking a streamed run as over failed");
        }
    }

    /// Frees the key: the run could not be recorded, and the client may try again.
    pub async fn release(self, store: &Arc<dyn EventStore>) {
        if let Err(err) = store.release_key(&self.key).await {
            tracing::warn!(error = %err, "releasing an idempotency key failed");
        }
    }

    /// Keeps `response` for replays and returns it. A response the skill wrote itself
    /// (`raw`) is not kept: the key stays claimed, and a replay says so.
    pub async fn settle(self, state: &AppState, response: Response, raw: bool) -> Response {
        let store = state.gateway.kernel.bus().store().clone();
        if raw {
            let kept = json!({ "raw": true }).to_string();
            if let Err(err) = store.settle_key(&self.key, &kept, KEEP).await {
                tracing::warn!(error = %err, "keeping an idempotent answer failed");
            }
            return response;
        }
        let (parts, body) = response.into_parts();
        let bytes = match axum::body::to_bytes(body, MAX_ANSWER).await {
            Ok(bytes) => bytes,
            Err(err) => {
                tracing::warn!(error = %err, "an idempotent answer could not be read to keep it");
                let _ = store.release_key(&self.key).await;
                return GatewayError::Internal {
                    cause: format!("the answer could not be read: {err}"),
                    run: None,
                }
                .into_response();
            }
        };
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json");
        let kept = json!({
            "status": parts.status.as_u16(),
            "contentType": content_type,
            "body": String::from_utf8_lossy(&bytes),
        });
        if let Err(err) = store.settle_key(&self.key, &kept.to_string(), KEEP).await {
            tracing::warn!(error = %err, "keeping an idempotent answer failed");
        }
        Response::from_parts(parts, Body::from(bytes))
    }
}

fn replay(stored: &str, given: &str) -> Result<Begin, GatewayError> {
    let kept: Value = serde_json::from_str(stored).unwrap_or(Value::Null);
    if kept.get("raw").is_some() {
        return Err(GatewayError::InProgress(format!(
            "the request with the `Idempotency-Key` `{given}` was answered by the skill itself (`web-send`); that answer is not replayed"
        )));
    }
    let status = kept["status"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::OK);
    let content_type = kept["contentType"].as_str().unwrap_or("application/json");
    let body = Bytes::from(kept["body"].as_str().unwrap_or_default().to_string());
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, v);
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    Ok(Begin::Replay(response))
}
