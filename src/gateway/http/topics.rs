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
use tokio::time::Instant;

use crate::events::KernelBus;
use crate::events::tail::{Follow, FollowError, Tailed};
use crate::gateway::GatewayError;
use crate::gateway::http::state::{AppState, StreamEnd};
use crate::gateway::keys::Caller;

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
    if !Caller::principal(caller.as_ref()).may_use_topic(&topic) {
        return Err(GatewayError::Denied {
            message: format!(
                "this key may not follow the topic `{topic}` (its `topics` do not name it; reserved topics need `admin`)"
            ),
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
    let until = StreamEnd::of(&state, caller.as_ref());
    Ok(sse(follow, until, None, |tailed| {
        let event = SseEvent::default()
            .event("event")
            .id(tailed.event.id.clone())
            .data(&tailed.json);
        (event, false)
    }))
}

/// A followed topic as server-sent events: a `gap` event where events went missing, then each
/// event as `frame` makes it (with whether it is the last one). Ends when `until` is
/// reached, at `deadline`, or when the follower falls behind or the bus closes (the client
/// comes back with its last id).
pub fn sse(
    follow: Follow,
    until: StreamEnd,
    deadline: Option<Instant>,
    frame: impl Fn(&Tailed) -> (SseEvent, bool) + Send + 'static,
) -> Response {
    let gap = follow.resumed_with_gap;
    let stream =
        futures::stream::unfold(Some((follow, gap, until, frame)), move |going| async move {
            let (mut follow, gap, until, frame) = going?;
            let gap_event = || SseEvent::default().event("gap").data("{}");
            if gap {
                return Some((
                    Ok::<_, Infallible>(gap_event()),
                    Some((follow, false, until, frame)),
                ));
            }
            let ends = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                () = until.reached() => return None,
                () = ends => return None,
                next = follow.next() => next,
            };
            match next {
                Ok(tailed) => {
                    let (event, last) = frame(&tailed);
                    Some((Ok(event), (!last).then_some((follow, false, until, frame))))
                }
                Err(FollowError::Gap) => {
                    Some((Ok(gap_event()), Some((follow, false, until, frame))))
                }
                Err(FollowError::Lagged(_) | FollowError::Closed) => None,
            }
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
