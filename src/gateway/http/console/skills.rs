//! The console's skills: the ones the login may invoke, each with its description, params and
//! returns, and a "try it" form that runs it as the login's caller (door `console`, recorded
//! like every run) and shows its answer.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::{Markup, PreEscaped, html};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::pages::{Viewer, layout};
use super::posted::Posted;
use super::{acting, looking, page, viewer_of};
use crate::gateway::dispatch::Inbound;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::gateway::reply::gather;
use crate::skills::tool::Tool;

/// The skills `caller` may invoke, by name.
fn listed(state: &AppState, caller: Option<&Caller>) -> Vec<Arc<Tool>> {
    let index = state.gateway.kernel.registry().current();
    let admin = Caller::principal(caller).admin();
    let mut tools: Vec<Arc<Tool>> = state
        .policy
        .listing(&index, Caller::scope(caller), admin)
        .into_iter()
        .cloned()
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools
}

pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (login, cookie) = match looking(&state, &headers).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    let tools = listed(&state, login.caller().as_ref());
    let body = html! {
        h1 { "Skills" }
        @if tools.is_empty() {
            p.empty { "No skill this login may invoke." }
        }
        dl.skills #skills {
            @for tool in &tools {
                dt { a href=(format!("/console/skills/{}", tool.name)) { code { (tool.name) } } }
                dd { (PreEscaped(crate::markdown::to_html(&tool.description))) }
            }
        }
    };
    page(
        StatusCode::OK,
        layout("Skills", Some(&viewer), body),
        cookie,
    )
}

/// A skill's params as a table: name, type, required, description.
fn params(tool: &Tool) -> Markup {
    let Some(schema) = tool.params() else {
        return html! { p.empty { "No params." } };
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    html! {
        @if properties.is_empty() {
            p.empty { "No named params." }
        } @else {
            table.params {
                thead { tr { th { "param" } th { "type" } th { "required" } th { "description" } } }
                tbody {
                    @for (name, field) in &properties {
                        tr {
                            td { code { (name) } }
                            td { (field["type"].as_str().map_or_else(|| field["type"].to_string(), str::to_string)) }
                            td { @if required.contains(&name.as_str()) { "yes" } }
                            td { (PreEscaped(crate::markdown::to_html(field["description"].as_str().unwrap_or("")))) }
                        }
                    }
                }
            }
        }
    }
}

/// Args a form starts with: each required param, empty of its type.
fn example(tool: &Tool) -> String {
    let mut args = Map::new();
    if let Some(schema) = tool.params() {
        for name in schema["required"].as_array().into_iter().flatten() {
            let Some(name) = name.as_str() else { continue };
            let empty = match schema["properties"][name]["type"].as_str() {
                Some("number" | "integer") => json!(0),
                Some("boolean") => json!(false),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!(""),
            };
            args.insert(name.to_string(), empty);
        }
    }
    serde_json::to_string_pretty(&Value::Object(args)).unwrap_or_else(|_| "{}".into())
}

/// A skill's page: its docs, the form, and (after a try) what it answered.
fn skill_page(viewer: &Viewer, tool: &Tool, args: &str, answer: Option<Markup>) -> Markup {
    let returns = tool.metadata.get("returns").filter(|r| !r.is_null());
    layout(
        &tool.name,
        Some(viewer),
        html! {
            h1 { "Skill " code { (tool.name) } }
            (PreEscaped(crate::markdown::to_html(&tool.description)))
            h2 { "Params" }
            (params(tool))
            @if let Some(returns) = returns {
                h2 { "Returns" }
                pre.json { (serde_json::to_string_pretty(returns).unwrap_or_default()) }
            }
            h2 { "Try it" }
            form.try method="post" action=(format!("/console/skills/{}/try", tool.name)) {
                input type="hidden" name="csrf" value=(viewer.csrf);
                label for="args" { "Args (JSON)" }
                textarea #args name="args" rows="8" cols="60" { (args) }
                button type="submit" #run { "Run" }
            }
            @if let Some(answer) = answer {
                (answer)
            }
        },
    )
}

pub async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let (login, cookie) = match looking(&state, &headers).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    let Some(tool) = find(&state, login.caller().as_ref(), &name) else {
        let body = super::pages::problem(
            Some(&viewer),
            "Not found",
            &format!("No skill `{name}` this login may invoke."),
        );
        return page(StatusCode::NOT_FOUND, body, cookie);
    };
    page(
        StatusCode::OK,
        skill_page(&viewer, &tool, &example(&tool), None),
        cookie,
    )
}

fn find(state: &AppState, caller: Option<&Caller>, name: &str) -> Option<Arc<Tool>> {
    listed(state, caller).into_iter().find(|t| t.name == name)
}

#[derive(Debug, Deserialize)]
pub struct TryForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    args: String,
}

/// Runs the skill with the form's args as the login's caller, as `POST /invoke` would.
pub async fn try_it(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    client: Option<axum::Extension<crate::gateway::peers::ClientAddr>>,
    Posted(form): Posted<TryForm>,
) -> Response {
    let login = match acting(&state, &headers, &form.csrf).await {
        Ok(login) => login,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    let caller = login.caller();
    let Some(tool) = find(&state, caller.as_ref(), &name) else {
        let body = super::pages::problem(
            Some(&viewer),
            "Not found",
            &format!("No skill `{name}` this login may invoke."),
        );
        return page(StatusCode::NOT_FOUND, body, None);
    };
    let args: Value = match serde_json::from_str(if form.args.trim().is_empty() {
        "{}"
    } else {
        &form.args
    }) {
        Ok(args @ Value::Object(_)) => args,
        Ok(_) => {
            return answer_page(
                &viewer,
                &tool,
                &form.args,
                StatusCode::BAD_REQUEST,
                failed("The args must be a JSON object."),
            );
        }
        Err(err) => {
            return answer_page(
                &viewer,
                &tool,
                &form.args,
                StatusCode::BAD_REQUEST,
                failed(&format!("The args are not JSON: {err}")),
            );
        }
    };
    let authority = state.policy.authority(&tool, principal.clone());
    let mut inbound = Inbound::call("console", &tool.name, authority, args, state.config.timeout);
    inbound.client = client.map(|axum::Extension(c)| c.0);
    let mut dispatch = state.gateway.dispatch(inbound);
    let run_id = dispatch.root_id.clone();
    let gathered = gather(&mut dispatch.parts).await;
    let run_link =
        html! { p { "Run " a href=(format!("/console/runs/{run_id}")) { code { (run_id) } } } };
    let (status, answer) = match gathered.outcome {
        Some(Ok(result)) => {
            let result = result.map_or(Value::Null, |r| (*r).clone());
            let shown = match &result {
                Value::String(text) => text.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            (
                StatusCode::OK,
                html! {
                    h2 { "Answer" }
                    (run_link)
                    pre.json #answer { (shown) }
                    @for message in &gathered.messages {
                        pre.message { (crate::gateway::reply::as_markdown(message)) }
                    }
                },
            )
        }
        Some(Err(err)) => {
            let problem = crate::gateway::GatewayError::from_run(&err, &tool.name, &run_id);
            (
                crate::gateway::problem::status(&problem),
                html! {
                    h2 { "Failed" }
                    (run_link)
                    p.problem #answer role="alert" { (problem.public_detail()) }
                },
            )
        }
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            failed("The run ended without an answer."),
        ),
    };
    answer_page(&viewer, &tool, &form.args, status, answer)
}

fn failed(why: &str) -> Markup {
    html! { h2 { "Failed" } p.problem #answer role="alert" { (why) } }
}

fn answer_page(
    viewer: &Viewer,
    tool: &Tool,
    args: &str,
    status: StatusCode,
    answer: Markup,
) -> Response {
    page(status, skill_page(viewer, tool, args, Some(answer)), None)
}
