//! Socket Mode: `apps.connections.open` with the app-level token, the WebSocket session Slack
//! pushes envelopes on, an ack for each envelope once its event is durably queued (an envelope
//! not acked comes again), and a new connection whenever Slack says `disconnect` (refresh,
//! link disabled) or the connection drops, with backoff from 1 s up to 30 s while it fails.
//! Every replica may hold a connection: Slack hands each envelope to one of them, and the
//! intake's once-only claim covers Slack's retries.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::gateway::slack::Slack;
use crate::gateway::transport::State;

/// The transport's name in `/readyz` for the Socket Mode connection.
pub const NAME: &str = "slack-socket";
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How a session ended.
enum Ended {
    /// Slack asked for a new connection.
    Refresh,
    Stopped,
}

/// Keeps a Socket Mode connection until `stop`.
pub async fn run(slack: Arc<Slack>, gateway: Gateway, app_token: String, stop: CancellationToken) {
    let readiness = gateway.readiness.clone();
    readiness.set(NAME, State::Starting);
    let mut backoff = FIRST_BACKOFF;
    loop {
        if stop.is_cancelled() {
            break;
        }
        match session(&slack, &app_token, &stop, &gateway).await {
            Ok(Ended::Stopped) => break,
            Ok(Ended::Refresh) => {
                backoff = FIRST_BACKOFF;
                tracing::info!("Slack Socket Mode: reconnecting as asked");
            }
            Err(err) => {
                readiness.set(NAME, State::Down);
                tracing::warn!(error = %err, retry_in_ms = backoff.as_millis() as u64, "Slack Socket Mode connection lost");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    readiness.set(NAME, State::Stopping);
}

/// One connection, from `apps.connections.open` to its end.
async fn session(
    slack: &Slack,
    app_token: &str,
    stop: &CancellationToken,
    gateway: &Gateway,
) -> Result<Ended, String> {
    let url = slack
        .api
        .open_connection(app_token)
        .await
        .map_err(|e| e.to_string())?;
    let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .map_err(|e| format!("connecting to Slack's socket: {e}"))?;
    let (mut sink, mut stream) = socket.split();
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => {
                let _ = sink.send(Message::Close(None)).await;
                return Ok(Ended::Stopped);
            }
            message = stream.next() => message,
        };
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Ping(payload))) => {
                sink.send(Message::Pong(payload))
                    .await
                    .map_err(|e| e.to_string())?;
                continue;
            }
            Some(Ok(Message::Close(frame))) => {
                return Err(format!("Slack closed the socket: {frame:?}"));
            }
            Some(Ok(_)) => continue,
            Some(Err(err)) => return Err(err.to_string()),
            None => return Err("the socket ended".into()),
        };
        let Ok(envelope) = serde_json::from_str::<Value>(text.as_str()) else {
            tracing::warn!("Slack Socket Mode: a message that is not JSON, skipped");
            continue;
        };
        match envelope["type"].as_str() {
            Some("hello") => gateway.readiness.set(NAME, State::Ready),
            Some("disconnect") => {
                tracing::info!(reason = %envelope["reason"], "Slack Socket Mode: disconnect");
                let _ = sink.send(Message::Close(None)).await;
                return Ok(Ended::Refresh);
            }
            Some("events_api") => {
                let Some(envelope_id) = envelope["envelope_id"].as_str() else {
                    continue;
                };
                match slack.intake.accept(&envelope["payload"]).await {
                    Ok(accepted) => {
                        tracing::debug!(envelope_id, ?accepted, "Slack event taken");
                        let ack = json!({ "envelope_id": envelope_id }).to_string();
                        sink.send(Message::Text(ack.into()))
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    // Not acked: Slack sends it again.
                    Err(err) => {
                        tracing::warn!(envelope_id, error = %err, "a Slack event could not be queued")
                    }
                }
            }
            // Slash commands and interactions are not taken; acked so Slack stops resending.
            Some(_) => {
                if let Some(envelope_id) = envelope["envelope_id"].as_str() {
                    let ack = json!({ "envelope_id": envelope_id }).to_string();
                    sink.send(Message::Text(ack.into()))
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            None => {}
        }
    }
}
