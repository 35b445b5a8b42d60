//! `GET /runs` and `GET /runs/{id}`: the runs record over HTTP. An admin key sees every run;
//! another key only its own, without what its answers left out (the server's error messages,
//! the chain's entries); the local caller when keys are off, the project's owner, its own
//! whole; anyone else (an anonymous visitor of public skills) none.

use axum::Extension;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde_json::Value;

use crate::events::KernelBus;
use crate::events::runs::{self, RunsQuery};
use crate::gateway::error::{GatewayError, Missing};
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::kernel::authority::PrincipalKind;

/// Whose runs `caller` may see: `None` for everyone's (admin), or its own principal's.
fn seen_by(caller: Option<&Caller>) -> Result<Option<String>, GatewayError> {
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
    let mut shown = runs::full(&run);
    // A key that is not `admin` is told of its own runs what it was told when they ran: not
    // the server's error message nor the layers and skills inside (hidden ones among them).
    if own.is_some()
        && Caller::principal(caller.as_ref()).kind() == PrincipalKind::Key
        && let Value::Object(fields) = &mut shown
    {
        fields.remove("error");
        fields.remove("entries");
    }
    Ok(Json(shown))
}
