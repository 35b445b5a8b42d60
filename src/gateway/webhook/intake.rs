//! Receiving a delivery: verify its signature, drop a duplicate (the same delivery id, on any
//! replica, within the dedupe window; for schemes that sign no timestamp, also the same body
//! within the route's replay window), queue it durably, then answer 202 with its id. The skill
//! runs from the queue (see `worker`), so a slow or failing skill never makes the sender retry.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde_json::{Value, json};

use crate::context::id::now_ms;
use crate::events::{Event, KernelBus, KeyClaim};
use crate::gateway::body;
use crate::gateway::headers::headers_json;
use crate::gateway::queue::{Enqueued, encode, enqueue_once};
use crate::gateway::signature::verify;
use crate::gateway::webhook::routes::WebhookRoute;
use crate::gateway::webhook::worker::Queued;
use crate::gateway::{Gateway, GatewayError};

/// How long a delivery id is remembered: longer than senders retry (Stripe: three days).
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(3 * 24 * 3600);

/// Answers one delivery to `route`.
pub async fn intake(
    gateway: &Gateway,
    route: &WebhookRoute,
    body_limit: usize,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match receive(gateway, route, body_limit, headers, body).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn receive(
    gateway: &Gateway,
    route: &WebhookRoute,
    body_limit: usize,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    let body = body.map_err(|rejection| body::rejected(&rejection, body_limit))?;
    let now = now_ms() / 1000;
    let verified = verify(
        &route.scheme,
        &route.secret,
        headers,
        &body,
        now,
        route.tolerance,
    )
    .map_err(|err| {
        tracing::info!(path = route.path, error = %err, "refused a webhook delivery");
        GatewayError::BadSignature(err.to_string())
    })?;
    // The body is data: one holding a directive key is refused now (422, naming its path), not
    // queued to be refused at every redelivery.
    let parsed = parse_body(&body);
    crate::gateway::edge::check_args(&parsed)
        .map_err(|err| GatewayError::from_run(&err, &route.skill, &verified.id))?;
    let key = format!("webhook:{}:{}", route.path, verified.id);
    let fingerprint = crate::digest::sha256_hex(&body);
    let bus = gateway.kernel.bus();
    // Without a signed timestamp a captured delivery could be sent again under a new delivery
    // id: the same body is taken once per replay window, whatever id it comes with.
    let replay_key = (!route.scheme.signs_time() && !route.replay_window.is_zero())
        .then(|| format!("webhook-body:{}:{fingerprint}", route.path));
    if let Some(replay_key) = &replay_key {
        match bus
            .store()
            .claim_key(replay_key, &verified.id, route.replay_window)
            .await
        {
            Ok(KeyClaim::Won) => {}
            Ok(KeyClaim::Held {
                fingerprint: first, ..
            }) if first != verified.id => {
                tracing::info!(
                    path = route.path,
                    delivery = verified.id,
                    first,
                    "a webhook body seen within the replay window came again under another delivery id; not run again"
                );
                return Ok((
                    StatusCode::OK,
                    Json(json!({ "deliveryId": verified.id, "duplicate": true })),
                )
                    .into_response());
            }
            Ok(KeyClaim::Held { .. }) => {}
            Err(err) => {
                return Err(GatewayError::Internal {
                    cause: err.to_string(),
                    run: None,
                });
            }
        }
    }
    let mut event = Event::new(&route.topic, "delivery");
    event.source = Some("webhook".into());
    event.data = Some(encode(&Queued {
        delivery_id: verified.id.clone(),
        path: route.path.clone(),
        scheme: route.scheme.name().to_string(),
        headers: headers_json(headers),
        body: parsed,
        received_at: now_ms(),
    }));
    let answer = json!({ "deliveryId": verified.id });
    let enqueued = match enqueue_once(
        bus,
        &key,
        &fingerprint,
        DEDUPE_WINDOW,
        &event,
        &answer.to_string(),
    )
    .await
    {
        Ok(enqueued) => enqueued,
        Err(cause) => {
            // Not taken: the sender's retry must not look like a replay.
            if let Some(replay_key) = &replay_key {
                let _ = bus.store().release_key(replay_key).await;
            }
            return Err(GatewayError::Internal { cause, run: None });
        }
    };
    match enqueued {
        Enqueued::Queued => {}
        Enqueued::Duplicate { answer: Some(_) } => {
            return Ok((
                StatusCode::OK,
                Json(json!({ "deliveryId": verified.id, "duplicate": true })),
            )
                .into_response());
        }
        Enqueued::Duplicate { answer: None } => {
            return Err(GatewayError::InProgress(format!(
                "delivery `{}` is being queued by another request; try again shortly",
                verified.id
            )));
        }
    }
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

/// The body as JSON when it is JSON, else as text.
fn parse_body(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}
