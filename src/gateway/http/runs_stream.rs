//! `GET /runs/stream`: runs as they start and once recorded, as server-sent events (`start`,
//! `end`), seen as the runs API sees them: an `admin` key every run, another key or the local
//! caller only its own. A listener that falls behind gets a `gap` event and goes on.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use crate::events::KernelBus;
use crate::gateway::GatewayError;
use crate::gateway::http::runs::seen_by;
use crate::gateway::http::state::{AppState, StreamEnd};
use crate::gateway::keys::Caller;

pub async fn stream(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Result<Response, GatewayError> {
    let caller = caller.map(|Extension(c)| c);
    let own = seen_by(caller.as_ref())?;
    let until = StreamEnd::of(&state, caller.as_ref());
    Ok(follow(&state, own, until))
}

/// The runs of this server as server-sent events, those of `own` only when given, until
/// `until` is reached.
pub(super) fn follow(state: &AppState, own: Option<String>, until: StreamEnd) -> Response {
    let feed = state.gateway.kernel.bus().runs().feed();
    let frames = futures::stream::unfold((feed, own, until), |(mut feed, own, until)| async move {
        loop {
            let next = tokio::select! {
                () = until.reached() => return None,
                next = feed.recv() => next,
            };
            let frame = match next {
                Ok(run) if seen(&run, own.as_deref()) => frame(&run),
                Ok(_) => continue,
                Err(RecvError::Lagged(missed)) => SseEvent::default()
                    .event("gap")
                    .data(format!("{{\"missed\":{missed}}}")),
                Err(RecvError::Closed) => return None,
            };
            return Some((Ok::<_, Infallible>(frame), (feed, own, until)));
        }
    });
    Sse::new(frames)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// Whether a listener that sees only `own`'s runs (`None`: every run) is shown `run`.
fn seen(run: &Arc<Value>, own: Option<&str>) -> bool {
    own.is_none_or(|own| run["principal"] == own)
}

fn frame(run: &Arc<Value>) -> SseEvent {
    let phase = run["phase"].as_str().unwrap_or("end");
    let mut data = (**run).clone();
    if let Value::Object(fields) = &mut data {
        fields.remove("phase");
    }
    let mut event = SseEvent::default().event(phase).data(data.to_string());
    if let Some(id) = run["id"].as_str() {
        event = event.id(format!("{phase}:{id}"));
    }
    event
}
