//! Per-request bookkeeping: the request id (accepted from `x-request-id` or generated, and
//! returned), the request's tracing span and request metrics (the in-flight count is kept by
//! `activity`, as it lasts until the response body ends), and the `Host` allow-list's check
//! (`hosts`), asked here rather than in a layer of its own.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::gateway::http::hosts;
use crate::gateway::http::state::AppState;

pub const HEADER: &str = "x-request-id";

/// The request's id, as a request extension.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// An id from the client is kept when it is 1 to 128 visible ASCII characters.
fn accepted(value: &HeaderValue) -> Option<String> {
    let s = value.to_str().ok()?;
    (!s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| s.to_string())
}

pub async fn track(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = req
        .headers()
        .get(HEADER)
        .and_then(accepted)
        .unwrap_or_else(|| crate::context::id::format(crate::context::id::next_id()));
    // Made-up methods are `other` in span names and metrics alike: both must stay bounded.
    let method = crate::gateway::metrics::method_label(req.method().as_str());
    // Shared with the router's, not copied.
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let span = tracing::info_span!(
        "http.request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        url.path = %req.uri().path(),
        request_id = %id,
        http.response.status_code = tracing::field::Empty,
    );
    req.extensions_mut().insert(RequestId(id.clone()));
    // The `Host` allow-list, inside this layer's id, span and metrics.
    let mut response = match span.in_scope(|| hosts::refusal(&state, &req)) {
        Some(refused) => refused,
        None => next.run(req).instrument(span.clone()).await,
    };
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    state
        .gateway
        .metrics
        .request(method, route, status, started.elapsed());
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}
