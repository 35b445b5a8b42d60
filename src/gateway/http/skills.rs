//! `GET /skills` and `GET /skills/{name}`: what a caller can invoke, with its schemas, as the
//! gateway's policy decides. A key scoped to some skills sees only those; others are 404, as if
//! they did not exist.

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde_json::{Value, json};

use crate::gateway::GatewayError;
use crate::gateway::error::Missing;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::skills::describe;

/// Origins are file paths on the server: not for clients.
fn public_view(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        map.remove("origin");
    }
    value
}

pub async fn list(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Json<Value> {
    let caller = caller.map(|Extension(caller)| caller);
    let scope = Caller::scope(caller.as_ref());
    let admin = Caller::principal(caller.as_ref()).admin();
    let index = state.gateway.kernel.registry().current();
    let skills: Vec<Value> = state
        .policy
        .listing(&index, scope, admin)
        .into_iter()
        .map(|t| public_view(describe::summary(t)))
        .collect();
    Json(json!({ "skills": skills }))
}

pub async fn describe(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, GatewayError> {
    let caller = caller.map(|Extension(caller)| caller);
    let index = state.gateway.kernel.registry().current();
    match state
        .policy
        .reach(&index, &name, Caller::scope(caller.as_ref()))
    {
        Ok(tool) => Ok(Json(public_view(describe::describe(&index, &tool)))),
        // Out of the caller's scope is not found too: a listing must not reveal what a key
        // may not invoke.
        Err(_) => Err(GatewayError::NotFound(Missing::Skill {
            name,
            suggestions: None,
        })),
    }
}
