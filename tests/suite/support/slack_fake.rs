//! A fake Slack on a local port that speaks Slack's wire protocol: the Web API methods the bot
//! calls (`auth.test`, `chat.postMessage`, `chat.update`, `apps.connections.open`, JSON in,
//! `{ok, ...}` out, bearer tokens checked, 429 with `Retry-After` on demand) and a Socket Mode
//! server (a `hello`, envelopes pushed by the test, acks recorded, envelopes not acked sent
//! again on the next connection, `disconnect` on demand). Also signs Events API requests.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::Notify;

pub const BOT_TOKEN: &str = "xoxb-test-bot-token";
pub const APP_TOKEN: &str = "xapp-test-app-token";
pub const SIGNING_SECRET: &str = "test-signing-secret";
pub const BOT_USER: &str = "UBOT";

/// One Web API call the fake answered.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    pub at: Instant,
}

#[derive(Default)]
pub struct Inner {
    pub calls: Mutex<Vec<Call>>,
    pub changed: Notify,
    /// Answer this many coming `chat.postMessage` calls with 429.
    pub rate_limit: AtomicU32,
    /// Envelopes to push, and those pushed but not acked yet.
    pub outbox: Mutex<VecDeque<Value>>,
    pub unacked: Mutex<Vec<Value>>,
    pub acks: Mutex<Vec<String>>,
    pub push: Notify,
    pub connections: AtomicU32,
    /// How many `disconnect`s were asked for (a connection sends one when this grows).
    disconnects: AtomicU32,
    pub disconnect: Notify,
    next_ts: AtomicU32,
}

#[derive(Clone)]
pub struct FakeSlack {
    pub addr: SocketAddr,
    pub inner: Arc<Inner>,
}

impl FakeSlack {
    pub async fn start() -> FakeSlack {
        let inner = Arc::new(Inner::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/api/{method}", post(api))
            .route("/socket", get(socket))
            .with_state(inner.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeSlack { addr, inner }
    }

    /// The Web API base URL to configure.
    pub fn api_url(&self) -> String {
        format!("http://{}/api/", self.addr)
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.inner
            .calls
            .lock()
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Waits until `holds` is true of the fake, woken by each call, connection and ack it
    /// records (a hang guard of 20 s names `what`).
    pub async fn until(&self, what: &str, holds: impl Fn(&Inner) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            // Registered before looking, so a change in between is not missed.
            changed.as_mut().enable();
            if holds(&self.inner) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("waited 20 s for {what}");
            }
        }
    }

    /// Waits until `count` calls of `method` were made, and returns them.
    pub async fn wait_calls(&self, method: &str, count: usize) -> Vec<Call> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let changed = self.inner.changed.notified();
            let calls = self.calls(method);
            if calls.len() >= count {
                return calls;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {count} `{method}` calls, got {calls:?}"
            );
            let _ = tokio::time::timeout(Duration::from_millis(200), changed).await;
        }
    }

    /// The posted messages in `thread` of `channel`, waiting for the last one (the one with
    /// skillgate's result metadata).
    pub async fn answer_in(&self, channel: &str, thread: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let changed = self.inner.changed.notified();
            let posts: Vec<Value> = self
                .calls("chat.postMessage")
                .into_iter()
                .map(|c| c.body)
                .filter(|b| b["channel"] == channel && b["thread_ts"] == thread)
                .collect();
            if posts
                .last()
                .is_some_and(|p| p["metadata"]["event_type"] == "skillgate_result")
            {
                return posts;
            }
            assert!(
                Instant::now() < deadline,
                "no answer in {channel}/{thread}: {posts:?}"
            );
            let _ = tokio::time::timeout(Duration::from_millis(200), changed).await;
        }
    }

    /// Queues an Events API payload for Socket Mode.
    pub fn push_envelope(&self, envelope_id: &str, payload: Value) {
        self.inner.outbox.lock().push_back(json!({
            "type": "events_api",
            "envelope_id": envelope_id,
            "payload": payload,
            "accepts_response_payload": false,
            "retry_attempt": 0,
        }));
        self.inner.push.notify_waiters();
    }

    /// Tells the connected client to reconnect (`refresh_requested`).
    pub fn disconnect(&self) {
        self.inner.disconnects.fetch_add(1, Ordering::SeqCst);
        self.inner.disconnect.notify_waiters();
    }
}

async fn api(
    State(inner): State<Arc<Inner>>,
    axum::extract::Path(method): axum::extract::Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let expected = if method == "apps.connections.open" {
        APP_TOKEN
    } else {
        BOT_TOKEN
    };
    if token != expected {
        return axum::Json(json!({ "ok": false, "error": "invalid_auth" })).into_response();
    }
    if method == "chat.postMessage"
        && inner
            .rate_limit
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        inner.calls.lock().push(Call {
            method: "429".into(),
            body: body.clone(),
            at: Instant::now(),
        });
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            axum::Json(json!({ "ok": false, "error": "ratelimited" })),
        )
            .into_response();
    }
    inner.calls.lock().push(Call {
        method: method.clone(),
        body: body.clone(),
        at: Instant::now(),
    });
    inner.changed.notify_waiters();
    let answer = match method.as_str() {
        "auth.test" => json!({
            "ok": true, "url": "https://test.slack.com/", "team": "Test Team", "user": "skillbot",
            "team_id": "T1", "user_id": BOT_USER, "bot_id": "BBOT",
        }),
        "chat.postMessage" => {
            let n = inner.next_ts.fetch_add(1, Ordering::SeqCst) + 1;
            json!({
                "ok": true, "channel": body["channel"], "ts": format!("1700000000.{n:06}"),
                "message": { "type": "message", "text": body["text"], "user": BOT_USER, "bot_id": "BBOT" },
            })
        }
        "chat.update" => {
            json!({ "ok": true, "channel": body["channel"], "ts": body["ts"], "text": body["text"] })
        }
        "apps.connections.open" => {
            json!({ "ok": true, "url": format!("ws://{}/socket", headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or_default()) })
        }
        _ => json!({ "ok": false, "error": "unknown_method" }),
    };
    axum::Json(answer).into_response()
}

async fn socket(State(inner): State<Arc<Inner>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| session(inner, socket))
}

async fn session(inner: Arc<Inner>, mut socket: WebSocket) {
    let asked = inner.disconnects.load(Ordering::SeqCst);
    inner.connections.fetch_add(1, Ordering::SeqCst);
    inner.changed.notify_waiters();
    let hello =
        json!({ "type": "hello", "num_connections": 1, "connection_info": { "app_id": "A1" } });
    if socket
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    // What the last connection did not ack comes again.
    let again: Vec<Value> = std::mem::take(&mut *inner.unacked.lock());
    for mut envelope in again {
        envelope["retry_attempt"] = json!(1);
        inner.outbox.lock().push_front(envelope);
    }
    loop {
        // Waiting from before the checks: a push or a disconnect in between is not missed.
        let push = inner.push.notified();
        let disconnect = inner.disconnect.notified();
        if inner.disconnects.load(Ordering::SeqCst) != asked {
            let bye = json!({ "type": "disconnect", "reason": "refresh_requested" });
            let _ = socket.send(Message::Text(bye.to_string().into())).await;
            let _ = socket.send(Message::Close(None)).await;
            return;
        }
        let next = inner.outbox.lock().pop_front();
        if let Some(envelope) = next {
            inner.unacked.lock().push(envelope.clone());
            if socket
                .send(Message::Text(envelope.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        tokio::select! {
            () = push => {}
            () = disconnect => {}
            message = socket.recv() => match message {
                Some(Ok(Message::Text(text))) => {
                    let ack: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                    if let Some(id) = ack["envelope_id"].as_str() {
                        inner.unacked.lock().retain(|e| e["envelope_id"] != id);
                        inner.acks.lock().push(id.to_string());
                        inner.changed.notify_waiters();
                    }
                }
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}

/// The headers Slack signs an Events API request with, at `timestamp`.
pub fn sign(body: &str, timestamp: u64, secret: &str) -> Vec<(&'static str, String)> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    let hex = skillgate::digest::hex(&mac.finalize().into_bytes());
    vec![
        ("x-slack-request-timestamp", timestamp.to_string()),
        ("x-slack-signature", format!("v0={hex}")),
    ]
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An `event_callback` with an `app_mention` of the bot saying `text` in `channel`.
pub fn mention(event_id: &str, channel: &str, ts: &str, text: &str) -> Value {
    json!({
        "token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": now(),
        "event": {
            "type": "app_mention", "user": "UHUMAN", "text": format!("<@{BOT_USER}> {text}"),
            "ts": ts, "channel": channel, "event_ts": ts,
        },
    })
}

/// A direct message from `user`.
pub fn dm(event_id: &str, user: &str, ts: &str, text: &str) -> Value {
    json!({
        "team_id": "T1", "type": "event_callback", "event_id": event_id, "event_time": now(),
        "event": {
            "type": "message", "channel_type": "im", "user": user, "text": text,
            "ts": ts, "channel": "D1", "event_ts": ts,
        },
    })
}
