//! The console's status page (an `admin` key's): each door's health as `/readyz` knows it, the
//! schedules with when they fire next, and the kept event subscriptions with their handlers.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::html;
use serde_json::{Value, json};

use super::pages::layout;
use super::{admin_only, looking, page, viewer_of};
use crate::events::KernelBus;
use crate::gateway::http::state::AppState;
use crate::kernel::InvokeOptions;
use crate::kernel::authority::Authority;

pub async fn show(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (login, cookie) = match looking(&state, &headers).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    if let Some(refused) = admin_only(
        &viewer,
        "Schedules and subscriptions are the control plane's: log in with an `admin` key.",
        &cookie,
    ) {
        return refused;
    }
    let kernel = &state.gateway.kernel;
    let doors = state.gateway.readiness.to_json();
    // The schedules as `schedule-list` tells this principal of them.
    let options = InvokeOptions::as_authority(Authority::caller(principal.clone()));
    let schedules = match kernel.invoke("schedule-list", json!({}), options).await {
        Ok(listed) => listed.map_or(Value::Null, |l| (*l).clone()),
        Err(err) => json!({ "error": err.to_string() }),
    };
    let subscriptions = kernel.bus().store().subscriptions().await;
    let body = html! {
        h1 { "Status" }
        h2 { "Doors" }
        table.doors #doors {
            thead { tr { th { "door" } th { "state" } } }
            tbody {
                @for (door, door_state) in doors.as_object().into_iter().flatten() {
                    tr class=(format!("door-{}", door_state.as_str().unwrap_or(""))) {
                        td { (door) } td { (door_state.as_str().unwrap_or("")) }
                    }
                }
            }
        }
        p.note { "Runs going now: " (state.gateway.runs_now()) }
        h2 { "Schedules" }
        @match schedules.as_array() {
            Some(list) if !list.is_empty() => {
                table.schedules #schedules {
                    thead { tr { th { "name" } th { "skill" } th { "next" } th.num { "runs" } th { "paused" } } }
                    tbody {
                        @for s in list {
                            tr {
                                td { (s["name"].as_str().unwrap_or("")) }
                                td { (s["ref"].as_str().or(s["skill"].as_str()).unwrap_or("")) }
                                td { (s["next"].as_str().unwrap_or("-")) }
                                td.num { (s["runs"]) }
                                td { (s["paused"].as_str().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
            Some(_) => { p.empty { "No schedules." } }
            None => { p.problem { "The schedules could not be listed: " (schedules["error"].as_str().unwrap_or("")) } }
        }
        h2 { "Subscriptions" }
        @match &subscriptions {
            Ok(list) if !list.is_empty() => {
                table.subscriptions #subscriptions {
                    thead { tr { th { "topic" } th { "queue" } th { "handler" } } }
                    tbody {
                        @for s in list {
                            @let spec: Value = serde_json::from_str(&s.spec).unwrap_or(Value::Null);
                            tr {
                                td { (s.topic) } td { (s.queue) }
                                td { (spec["ref"].as_str().or(spec["reference"].as_str()).unwrap_or("")) }
                            }
                        }
                    }
                }
            }
            Ok(_) => { p.empty { "No kept subscriptions." } }
            Err(err) => { p.problem { "The subscriptions could not be read: " (err.to_string()) } }
        }
    };
    page(
        StatusCode::OK,
        layout("Status", Some(&viewer), body),
        cookie,
    )
}
