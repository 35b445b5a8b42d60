//! `POST /slack/events` (the Events API): the request's `X-Slack-Signature` verified (v0, five
//! minutes of tolerance), `url_verification` answered with its challenge, an event callback
//! taken by the intake, and 200 once it is durably queued (or known), well within Slack's 3 s.
//! Whatever `X-Slack-Retry-Num` says, an `event_id` runs once.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde_json::{Value, json};

use crate::context::id::now_ms;
use crate::gateway::GatewayError;
use crate::gateway::body;
use crate::gateway::signature::{Scheme, verify};
use crate::gateway::slack::Slack;

/// Seconds a request's timestamp may be away from now.
const TOLERANCE: u64 = 300;

/// What the endpoint's handler shares: the door, and the listener's body limit.
#[derive(Clone)]
pub struct Endpoint {
    pub slack: Arc<Slack>,
    pub body_limit: usize,
}

pub async fn events(
    State(Endpoint { slack, body_limit }): State<Endpoint>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    let body = body.map_err(|rejection| body::rejected(&rejection, body_limit))?;
    let Some(secret) = slack.config.signing_secret.as_deref() else {
        return Err(GatewayError::Unavailable(
            "the Events API needs a signing secret".into(),
        ));
    };
    verify(
        &Scheme::Slack,
        secret,
        &headers,
        &body,
        now_ms() / 1000,
        TOLERANCE,
    )
    .map_err(|err| {
        tracing::info!(error = %err, "refused a Slack request");
        GatewayError::BadSignature(err.to_string())
    })?;
    let payload: Value =
        serde_json::from_slice(&body).map_err(|e| GatewayError::malformed_json(&e))?;
    if payload["type"] == "url_verification" {
        return Ok(Json(json!({ "challenge": payload["challenge"] })).into_response());
    }
    let retry = headers
        .get("x-slack-retry-num")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("0");
    match slack.intake.accept(&payload).await {
        Ok(accepted) => {
            tracing::debug!(event_id = %payload["event_id"], retry, ?accepted, "Slack event taken");
            Ok(StatusCode::OK.into_response())
        }
        Err(cause) => {
            tracing::error!(event_id = %payload["event_id"], %cause, "a Slack event could not be queued; Slack will retry");
            Err(GatewayError::Internal { cause, run: None })
        }
    }
}
