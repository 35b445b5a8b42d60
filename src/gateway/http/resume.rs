//! Resumable streamed runs: a `POST /invoke/{skill}` stream sent with an `Idempotency-Key` is
//! recorded frame by frame on a reserved durable topic (`gateway-stream.<hash of the key>`),
//! and the client reads that topic; each SSE frame's id is its durable event id. A client that
//! lost the connection sends the same request again with `Last-Event-ID` and gets every frame
//! after it, on any replica sharing the store; without `Last-Event-ID`, every frame from the
//! first. The run does not depend on its client: it goes on when the connection drops.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use tokio_util::sync::CancellationToken;

use crate::events::tail::Follow;
use crate::events::{Bus, Event, KernelBus};
use crate::gateway::http::idempotency::{Claim, LAST_EVENT_ID};
use crate::gateway::http::invoke::frame;
use crate::gateway::http::state::{AppState, StreamEnd};
use crate::gateway::http::topics::sse;
use crate::gateway::{Dispatch, GatewayError};

/// Frame names that end a run's stream.
const LAST: [&str; 2] = ["result", "error"];

/// Starts recording `dispatch` under `claim` and answers with the recorded stream.
pub async fn record(
    state: &AppState,
    dispatch: Dispatch,
    claim: Claim,
    skill: String,
    request_id: String,
) -> Result<Response, GatewayError> {
    let topic = claim.stream_topic();
    let bus = state.gateway.kernel.bus().clone();
    // Following before the first frame is emitted: the client misses none.
    let follow = match bus.follow(&topic, None).await {
        Ok(follow) => follow,
        Err(err) => {
            claim.release(bus.store()).await;
            return Err(GatewayError::Internal {
                cause: format!("following the run's stream: {err}"),
                run: None,
            });
        }
    };
    // Cancelled when the recording fails, and when the server stops.
    let failed = state.stopping.child_token();
    state.background.spawn(recorder(
        bus,
        dispatch,
        claim,
        topic,
        skill,
        request_id,
        failed.clone(),
    ));
    Ok(stream(state, follow, failed))
}

/// Follows the stream a run with the same key recorded: after `Last-Event-ID`, or from its
/// first frame. A run that is `over` and whose frames left the buffer is 410.
pub async fn follow(
    state: &AppState,
    topic: &str,
    over: bool,
    headers: &HeaderMap,
) -> Result<Response, GatewayError> {
    let bus = state.gateway.kernel.bus();
    let from = headers.get(LAST_EVENT_ID).and_then(|v| v.to_str().ok());
    let follow = match from {
        Some(id) => bus.follow(topic, Some(id)).await,
        None => bus.follow_buffer(topic).await,
    }
    .map_err(|err| GatewayError::Internal {
        cause: format!("following a recorded stream: {err}"),
        run: None,
    })?;
    let done = state.stopping.child_token();
    if over {
        let buffered = bus
            .store()
            .buffered(topic, None, usize::MAX)
            .await
            .map_err(|err| GatewayError::Internal {
                cause: format!("reading a recorded stream: {err}"),
                run: None,
            })?;
        let Some(end) = buffered.iter().rfind(|e| LAST.contains(&e.kind.as_str())) else {
            return Err(GatewayError::Gone(
                "the streamed run with this `Idempotency-Key` is over and its frames have left the event buffer".into(),
            ));
        };
        if from == Some(end.id.as_str()) {
            // The client saw the last frame: nothing follows.
            done.cancel();
        }
    }
    Ok(stream(state, follow, done))
}

/// Emits each frame of the run on `topic`; settles the key after the last one. A frame that
/// cannot be stored ends the run and frees the key (`failed` ends the client's stream).
async fn recorder(
    bus: Arc<Bus>,
    mut dispatch: Dispatch,
    claim: Claim,
    topic: String,
    skill: String,
    request_id: String,
    failed: CancellationToken,
) {
    while let Some(part) = dispatch.parts.recv().await {
        let Some((name, data, last)) = frame(part, &skill, &request_id) else {
            continue;
        };
        let mut event = Event::new(&topic, name);
        event.source = Some("gateway".into());
        // No root context id: the run's own events are streamed to it, and a recorded frame
        // must not come back as one.
        event.data = Some(data);
        if let Err(err) = bus.emit(&event).await {
            tracing::error!(skill, request_id, error = %err, "recording a streamed run failed; the run is stopped");
            break;
        }
        if last {
            claim.settle_stream(bus.store()).await;
            return;
        }
    }
    claim.release(bus.store()).await;
    failed.cancel();
}

/// The SSE response: the recorded frames, ending after the last one, when `until` is
/// cancelled (the recording failed, or the server stops: the client resumes on another
/// replica), or once the run can no longer be going.
fn stream(state: &AppState, follow: Follow, until: CancellationToken) -> Response {
    let deadline = tokio::time::Instant::now()
        + state.config.timeout
        + state.config.grace
        + Duration::from_secs(60);
    sse(follow, StreamEnd::at(until), Some(deadline), |tailed| {
        let kind = tailed.event.kind.as_str();
        let data = tailed
            .event
            .data
            .as_ref()
            .map_or_else(|| "null".to_string(), ToString::to_string);
        let event = SseEvent::default()
            .event(kind)
            .id(tailed.event.id.clone())
            .data(data);
        (event, LAST.contains(&kind))
    })
}
