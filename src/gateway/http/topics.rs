//! `GET /events/{topic}`: a topic followed as server-sent events, each with its durable event id
//! as the SSE `id`, resumed after `Last-Event-ID` (or `?from=`) from the durable buffer.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::events::KernelBus;
use crate::events::tail::FollowError;
use crate::gateway::GatewayError;
use crate::gateway::http::auth::Caller;
use crate::gateway::http::state::AppState;

#[derive(Debug, Deserialize)]
pub struct FromQuery {
    from: Option<String>,
}

pub async fn follow(
    State(state): State<AppState>,
    Path(topic): Path<String>,
    Query(query): Query<FromQuery>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Result<Response, GatewayError> {
    let caller = caller.map(|Extension(c)| c);
    if !Caller::scope(caller.as_ref()).is_all() {
        return Err(GatewayError::Denied {
            message: "a key limited to some skills cannot follow topics".into(),
            run: None,
        });
    }
    let from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(query.from);
    let bus = state.gateway.kernel.bus().clone();
    let follow = bus
        .follow(&topic, from.as_deref())
        .await
        .map_err(|e| GatewayError::BadRequest(e.message().to_string()))?;
    let gap = follow.resumed_with_gap;
    let stop = state.stopping.clone();
    let stream =
        futures::stream::unfold((follow, gap, stop), |(mut follow, gap, stop)| async move {
            if gap {
                let event = SseEvent::default().event("gap").data("{}");
                return Some((Ok::<_, Infallible>(event), (follow, false, stop)));
            }
            let next = tokio::select! {
                () = stop.cancelled() => return None,
                next = follow.next() => next,
            };
            let event = match next {
                Ok(tailed) => SseEvent::default()
                    .event("event")
                    .id(tailed.event.id.clone())
                    .data(&tailed.json),
                Err(FollowError::Gap) => SseEvent::default().event("gap").data("{}"),
                // Too slow, or the bus is closing: the client reconnects with its last id.
                Err(FollowError::Lagged(_) | FollowError::Closed) => return None,
            };
            Some((Ok(event), (follow, false, stop)))
        });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}
