//! `GET /skills` and `GET /skills/{name}`: what a caller can invoke, with its schemas. A key
//! scoped to some skills sees only those; others are 404, as if they did not exist.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use crate::gateway::http::auth::Caller;
use crate::gateway::http::problem::Problem;
use crate::gateway::http::state::AppState;
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
    let index = state.gateway.kernel.registry().current();
    let mut skills: Vec<Value> = index
        .tools()
        .filter(|t| state.callable(t, caller.as_ref()))
        .map(|t| public_view(describe::summary(t)))
        .collect();
    skills.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(json!({ "skills": skills }))
}

pub async fn describe(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Path(name): Path<String>,
) -> Response {
    let caller = caller.map(|Extension(caller)| caller);
    let index = state.gateway.kernel.registry().current();
    match index.get(&name) {
        Some(tool) if state.callable(tool, caller.as_ref()) => {
            Json(public_view(describe::describe(&index, tool))).into_response()
        }
        _ => Problem::not_found(format!("no skill is named `{name}`"))
            .with("skill", Value::String(name))
            .into_response(),
    }
}
