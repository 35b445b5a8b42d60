//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`, `/openapi.yaml`, `/docs`, and the
//! problem for paths nothing serves.

use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;

use crate::events::KernelBus;
use crate::gateway::error::Missing;
use crate::gateway::http::openapi;
use crate::gateway::http::state::AppState;
use crate::gateway::{Gateway, GatewayError};

/// Liveness: the process answers.
pub async fn healthz() -> Response {
    axum::Json(json!({ "status": "ok" })).into_response()
}

/// Readiness: the event store answers, the skills loaded without failures, and every
/// transport is ready (each one's state is listed).
pub async fn readyz(State(state): State<AppState>) -> Response {
    readiness(&state.gateway).await
}

/// The metrics' content type.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The readiness report of the server `gateway` serves (`/readyz` on HTTP and on the operations
/// listener).
pub async fn readiness(gateway: &Gateway) -> Response {
    let kernel = &gateway.kernel;
    // The path is public: it says which check failed, never where (file paths, store
    // addresses); the causes are in the log.
    let store = match kernel.bus().store().ping().await {
        Ok(()) => json!({ "ok": true, "kind": kernel.bus().store().kind() }),
        Err(err) => {
            tracing::warn!(error = %err, "readiness: the event store does not answer");
            json!({
                "ok": false,
                "kind": kernel.bus().store().kind(),
                "error": "the event store does not answer; the cause is in the server log",
            })
        }
    };
    let index = kernel.registry().current();
    let failures: Vec<&str> = index.failures().iter().map(|f| f.name.as_str()).collect();
    let skills = json!({
        "ok": failures.is_empty() && index.tools().next().is_some(),
        "count": index.tools().count(),
        "failures": failures,
    });
    let transports = gateway.readiness.to_json();
    let ready = store["ok"] == true && skills["ok"] == true && gateway.readiness.ready();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if ready { "ready" } else { "not-ready" },
        "store": store,
        "skills": skills,
        "transports": transports,
        // Told to stop and still taking work for `--drain` (not ready, so balancers let go).
        "draining": gateway.readiness.draining(),
        // The last hot reload, when the server reloads (`null` before the first).
        "reload": kernel
            .extension::<crate::reload::ReloadState>()
            .map(|state| state.to_json()),
        // Schedules that do not fire, and why (`null` where nothing fires schedules).
        "schedules": kernel
            .extension::<crate::schedule::health::ScheduleHealth>()
            .map(|health| health.to_json()),
    });
    (status, axum::Json(body)).into_response()
}

/// The metrics name every skill, hidden ones included: a key limited to some skills may not
/// read them (an unscoped or `admin` key may; so may anyone where the operator made the path
/// public).
pub async fn metrics(
    State(state): State<AppState>,
    caller: Option<axum::Extension<crate::gateway::keys::Caller>>,
) -> Response {
    if let Some(axum::Extension(crate::gateway::keys::Caller::Key(key))) = &caller
        && !may_read_metrics(key.principal())
    {
        return crate::gateway::GatewayError::Denied {
            message:
                "a key limited to some skills may not read the metrics (they name every skill)"
                    .into(),
            run: None,
        }
        .into_response();
    }
    render_metrics(&state.gateway)
}

/// Whether a key may read the metrics, which name every skill: one with every skill, or `admin`.
pub fn may_read_metrics(principal: &crate::kernel::authority::Principal) -> bool {
    principal.all_skills() || principal.admin()
}

/// The metrics as OpenMetrics text (HTTP's `/metrics` and the operations listener's).
pub fn render_metrics(gateway: &Gateway) -> Response {
    let runs = gateway.kernel.bus().runs();
    gateway
        .metrics
        .runs(runs.written_total(), runs.dropped_total());
    (
        [(header::CONTENT_TYPE, OPENMETRICS)],
        gateway.metrics.render(),
    )
        .into_response()
}

/// The checked-in `openapi.yaml`, byte for byte.
pub async fn openapi_yaml() -> Response {
    (
        [(header::CONTENT_TYPE, "application/yaml")],
        openapi::DOCUMENT,
    )
        .into_response()
}

/// The AsyncAPI document of the WebSocket protocol.
pub async fn asyncapi_yaml() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], ASYNCAPI).into_response()
}

/// The checked-in `asyncapi.yaml`, served as is.
pub const ASYNCAPI: &str = include_str!("../../../asyncapi.yaml");

/// The docs page, rendered from the OpenAPI document.
/// `GET /docs`: the API, and the project's skills when keys are off (the local caller's; with
/// keys on `/docs` is public, and which skills exist is for keys to know).
pub async fn docs(State(state): State<AppState>) -> Response {
    if !state.config.keys.is_empty() {
        return Html(openapi::docs_with_skills(None)).into_response();
    }
    let index = state.gateway.kernel.registry().current();
    let scope = crate::gateway::keys::Caller::scope(None);
    let mut tools: Vec<_> = state
        .policy
        .listing(&index, scope, false)
        .into_iter()
        .cloned()
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Html(openapi::docs_with_skills(Some(&tools))).into_response()
}

pub async fn not_found(uri: Uri) -> Response {
    GatewayError::NotFound(Missing::Path(uri.path().to_string())).into_response()
}

pub async fn method_not_allowed(uri: Uri) -> Response {
    GatewayError::MethodNotAllowed {
        path: uri.path().to_string(),
    }
    .into_response()
}
