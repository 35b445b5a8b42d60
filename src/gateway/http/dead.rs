//! `GET /dead` and `POST /dead/{id}/replay`: the dead letters of every queue (webhook
//! deliveries, event handlers' queues, workers' queues), and one put back into the queue it
//! died in. They hold every door's payloads: `admin` only.

use axum::Extension;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::events::KernelBus;
use crate::events::dead::{self, ReplayError};
use crate::gateway::error::GatewayError;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;

/// Letters a listing holds unless asked otherwise, and at most.
const PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadQuery {
    limit: Option<usize>,
}

fn admin_only(caller: Option<&Caller>) -> Result<(), GatewayError> {
    if Caller::principal(caller).admin() {
        return Ok(());
    }
    Err(GatewayError::Denied {
        message: "dead letters hold every door's payloads: they need an `admin` key".into(),
        run: None,
    })
}

fn store_failed(err: impl std::fmt::Display) -> GatewayError {
    GatewayError::Internal {
        cause: format!("the dead letters could not be read: {err}"),
        run: None,
    }
}

pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<DeadQuery>, QueryRejection>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<Value>, GatewayError> {
    admin_only(caller.as_ref().map(|Extension(c)| c))?;
    let Query(query) = query.map_err(|e| GatewayError::BadRequest(e.body_text()))?;
    let limit = query.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE);
    let letters = dead::list(state.gateway.kernel.bus().store(), limit)
        .await
        .map_err(store_failed)?;
    let letters: Vec<Value> = letters.iter().map(dead::DeadLetter::to_json).collect();
    Ok(Json(json!({ "letters": letters })))
}

pub async fn replay(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<Value>, GatewayError> {
    admin_only(caller.as_ref().map(|Extension(c)| c))?;
    match dead::replay(state.gateway.kernel.bus().store(), &id).await {
        Ok(letter) => {
            tracing::info!(letter = %id, topic = %letter.topic, queue = %letter.queue, "dead letter replayed");
            Ok(Json(json!({ "replayed": letter.to_json() })))
        }
        Err(ReplayError::Missing(id)) => Err(GatewayError::NotFound(
            crate::gateway::error::Missing::Letter(id),
        )),
        Err(err @ ReplayError::Unreadable(_)) => Err(GatewayError::BadRequest(err.to_string())),
        Err(ReplayError::Store(err)) => Err(store_failed(err)),
    }
}
