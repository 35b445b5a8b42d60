//! `GET /runs` and `GET /runs/{id}`: the runs record over HTTP. An admin key sees every run;
//! another key only its own, without what its answers left out (the server's error messages,
//! the chain's entries); the local caller when keys are off, the project's owner, its own
//! whole; anyone else (an anonymous visitor of public skills) none. `POST /runs/{id}/retry`
//! runs a recorded run again (admin only).

use axum::Extension;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::context::id::now_ms;
use crate::events::KernelBus;
use crate::events::records::StoredRun;
use crate::events::runs::{self, RunsQuery};
use crate::gateway::dispatch::Inbound;
use crate::gateway::error::{GatewayError, Missing};
use crate::gateway::http::invoke::respond;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::gateway::principal;
use crate::kernel::authority::{Authority, Keys, PrincipalKind};

/// Whose runs `caller` may see: `None` for everyone's (admin), or its own principal's.
pub(super) fn seen_by(caller: Option<&Caller>) -> Result<Option<String>, GatewayError> {
    let principal = Caller::principal(caller);
    if principal.admin() {
        return Ok(None);
    }
    match principal.kind() {
        PrincipalKind::Local | PrincipalKind::Key => Ok(Some(principal.id().to_string())),
        _ => Err(GatewayError::Denied {
            message:
                "the runs record needs an API key (a key sees its own runs; `admin` sees every run)"
                    .into(),
            run: None,
        }),
    }
}

fn store_failed(err: impl std::fmt::Display) -> GatewayError {
    GatewayError::Internal {
        cause: format!("the runs record could not be read: {err}"),
        run: None,
    }
}

pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<RunsQuery>, QueryRejection>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<Value>, GatewayError> {
    let caller = caller.map(|Extension(c)| c);
    let own = seen_by(caller.as_ref())?;
    let Query(query) = query.map_err(|e| GatewayError::BadRequest(e.body_text()))?;
    let mut filter = query.filter().map_err(GatewayError::BadRequest)?;
    if let Some(own) = own {
        if filter.principal.as_ref().is_some_and(|p| *p != own) {
            return Err(GatewayError::Denied {
                message: format!(
                    "this key sees only its own runs (`principal={own}`); every run needs `admin`"
                ),
                run: None,
            });
        }
        filter.principal = Some(own);
    }
    let found = state
        .gateway
        .kernel
        .bus()
        .store()
        .runs(&filter)
        .await
        .map_err(store_failed)?;
    Ok(Json(runs::page(&found, filter.limit)))
}

pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<Value>, GatewayError> {
    let caller = caller.map(|Extension(c)| c);
    let own = seen_by(caller.as_ref())?;
    let found = state
        .gateway
        .kernel
        .bus()
        .store()
        .run(&id)
        .await
        .map_err(store_failed)?
        .filter(|run| own.as_ref().is_none_or(|own| *own == run.principal));
    let Some(run) = found else {
        return Err(GatewayError::NotFound(Missing::Run(id)));
    };
    Ok(Json(shown_to(&run, caller.as_ref())))
}

/// A run as `caller` is shown it. A key that is not `admin` is told of its own runs what it was
/// told when they ran: not the server's error message, nor the layers, skills, logs and model
/// calls inside (hidden ones among them).
pub(super) fn shown_to(run: &StoredRun, caller: Option<&Caller>) -> Value {
    let mut shown = runs::full(run);
    let principal = Caller::principal(caller);
    if principal.kind() == PrincipalKind::Key
        && !principal.admin()
        && let Value::Object(fields) = &mut shown
    {
        for inside in ["error", "entries", "logs", "logsLeftOut", "turns"] {
            fields.remove(inside);
        }
    }
    shown
}

/// `POST /runs/{id}/retry`: runs the recorded run again as a new run linked to it (`parent`),
/// with its args whole and for its principal as that principal is now (a revoked key's runs are
/// not retried), at the level it ran at. Only an `admin` key retries: it acts for another
/// principal. Answers like `/invoke`, with the new run's id.
pub async fn retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Result<Response, GatewayError> {
    let caller = caller.map(|Extension(c)| c);
    let started = start_retry(&state, caller.as_ref(), &id).await?;
    let new_id = started.dispatch.root_id.clone();
    Ok(respond(
        started.dispatch,
        &started.skill,
        &started.request_id,
        move |result, messages| {
            let mut body = json!({ "id": new_id, "parent": id, "result": result });
            if !messages.is_empty() {
                body["messages"] = Value::Array(messages);
            }
            Json(body).into_response()
        },
    )
    .await)
}

/// A retry on its way.
pub(super) struct Retrying {
    pub dispatch: crate::gateway::dispatch::Dispatch,
    pub skill: String,
    pub request_id: String,
}

/// Starts the retry of the recorded run `id` for `caller`, who must hold `admin`.
pub(super) async fn start_retry(
    state: &AppState,
    caller: Option<&Caller>,
    id: &str,
) -> Result<Retrying, GatewayError> {
    if !Caller::principal(caller).admin() {
        return Err(GatewayError::Denied {
            message: "retrying a run acts for its principal: it needs an `admin` key".into(),
            run: None,
        });
    }
    let kernel = &state.gateway.kernel;
    let Some(run) = kernel.bus().store().run(id).await.map_err(store_failed)? else {
        return Err(GatewayError::NotFound(Missing::Run(id.to_string())));
    };
    let window = kernel
        .bus()
        .runs()
        .config()
        .unwrap_or_default()
        .retry_window;
    let retry =
        runs::retry_of(&run, window, now_ms() as i64).map_err(GatewayError::NotRetryable)?;
    let keys = kernel.extension::<Keys>().map(|k| &**k);
    let principal = principal::recorded(&retry.principal, keys).map_err(|why| {
        GatewayError::NotRetryable(format!("run `{id}` cannot be retried: {why}"))
    })?;
    let authority = if retry.project_level {
        Authority::serving(principal)
    } else {
        Authority::caller(principal)
    };
    let inbound = Inbound::call(
        "retry",
        &retry.skill,
        authority,
        retry.args,
        state.config.timeout,
    );
    let request_id = inbound.request_id.clone();
    Ok(Retrying {
        dispatch: state.gateway.dispatch_retry(inbound, id.to_string()),
        skill: retry.skill,
        request_id,
    })
}
