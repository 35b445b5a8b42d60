//! Custom routes: `web.routes: [{method, path, ref}]` in the project's main skill (and the
//! cascade above it), and `web.route` on any skill. The handler skill gets
//! `{route, query, body, headers, method, path, params}`; a string result is HTML, an object JSON,
//! nothing a 204.

use crate::gateway::http::session_cookie::WebSession;
use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Query, RawPathParams, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{MethodFilter, on};
use serde_json::{Map, Value, json};

use crate::cascade;
use crate::error::SkillError;
use crate::gateway::body;
use crate::gateway::headers::headers_json;
use crate::gateway::http::invoke::{request_fields, respond};
use crate::gateway::http::request_id::RequestId;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::gateway::{GatewayError, Inbound};
use crate::kernel::ToolRef;
use crate::kernel::authority::Authority;
use crate::skills::index::SearchIndex;
use crate::skills::tool::Tool;

/// One custom route.
#[derive(Debug, Clone)]
pub struct WebRoute {
    pub method: Method,
    /// As written (`/hello/:name`), passed to the handler as `route`.
    pub pattern: String,
    /// In the router's syntax (`/hello/{name}`).
    pub path: String,
    pub skill: String,
    /// Where it was declared, for error messages.
    pub declared_in: String,
}

/// A route the server refuses to start with; `at` says where it was declared.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The cascade of the main skill, which declares the routes, does not resolve.
    #[error(transparent)]
    Metadata(#[from] SkillError),
    #[error("{at}: must be a list of {{method, path, ref}}")]
    NotAList { at: String },
    #[error("{at}: must be an object {{method, path, ref}}")]
    NotAnObject { at: String },
    #[error("{at}: write `METHOD /path`, found `{found}`")]
    NotMethodAndPath { at: String, found: String },
    #[error("{at}: `path` is missing")]
    NoPath { at: String },
    #[error("{at}: `ref` (the skill to run) is missing")]
    NoRef { at: String },
    #[error("{at}: `{method}` is not an HTTP method")]
    BadMethod { at: String, method: String },
    #[error("{at}: the path `{pattern}` must start with `/`")]
    RelativePath { at: String, pattern: String },
    #[error("{at}: `{pattern}` is a path skillgate serves itself")]
    Reserved { at: String, pattern: String },
    #[error("{at}: no skill is named `{skill}`{}", .suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    NoSkill {
        at: String,
        skill: String,
        /// The closest skill name, if one is close.
        suggestion: Option<String>,
    },
    #[error("{at}: {method} {pattern} is also declared in {first}")]
    Duplicate {
        at: String,
        method: Method,
        pattern: String,
        first: String,
    },
}

/// Paths the gateway serves itself.
pub const RESERVED: [&str; 15] = [
    "/invoke",
    "/skills",
    "/openapi.json",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.yaml",
    "/asyncapi.yaml",
    "/docs",
    "/ws",
    "/events",
    "/mcp",
    "/runs",
    "/dead",
    "/console",
];

/// True when `path` is one the gateway serves itself.
pub fn is_reserved(path: &str) -> bool {
    RESERVED
        .iter()
        .any(|r| path == *r || path.starts_with(&format!("{r}/")))
}

/// True when `path` is already served: one the gateway serves itself, or one of `web`.
pub fn is_served(web: &[WebRoute], path: &str) -> bool {
    is_reserved(path) || web.iter().any(|r| r.path == path)
}

/// Every route the skills declare, checked: known methods, free paths, existing skills. The
/// first mistake is the error; [`check`] lists them all.
pub fn collect(
    index: &SearchIndex,
    project: &std::path::Path,
) -> Result<Vec<WebRoute>, RouteError> {
    let (routes, mut errors) = collect_all(index, project);
    if errors.is_empty() {
        Ok(routes)
    } else {
        Err(errors.swap_remove(0))
    }
}

/// Every mistake in the routes the skills declare (empty when they are sound).
pub fn check(index: &SearchIndex, project: &std::path::Path) -> Vec<RouteError> {
    collect_all(index, project).1
}

fn collect_all(index: &SearchIndex, project: &std::path::Path) -> (Vec<WebRoute>, Vec<RouteError>) {
    let mut routes = Vec::new();
    let mut errors = Vec::new();
    if let Some(main) = index.main_skill(project) {
        match cascade::merged_for(index, main) {
            Err(e) => errors.push(RouteError::Metadata(e)),
            Ok(merged) => {
                if let Some(list) = merged.metadata.get("web").and_then(|w| w.get("routes")) {
                    let where_ = format!("{}: metadata.web.routes", main.location());
                    match list {
                        Value::Array(items) => {
                            for (i, item) in items.iter().enumerate() {
                                match parse(item, None, &format!("{where_}[{i}]")) {
                                    Ok(route) => routes.push(route),
                                    Err(e) => errors.push(e),
                                }
                            }
                        }
                        _ => errors.push(RouteError::NotAList { at: where_ }),
                    }
                }
            }
        }
    }
    for tool in index.tools() {
        if let Some(route) = tool.metadata.get("web").and_then(|w| w.get("route")) {
            let where_ = format!("{}: metadata.web.route", tool.location());
            match parse(route, Some(tool), &where_) {
                Ok(route) => routes.push(route),
                Err(e) => errors.push(e),
            }
        }
    }
    let mut seen: HashMap<(String, String), String> = HashMap::new();
    for route in &routes {
        if is_reserved(&route.path) {
            errors.push(RouteError::Reserved {
                at: route.declared_in.clone(),
                pattern: route.pattern.clone(),
            });
        }
        if index.get(&route.skill).is_none() {
            errors.push(RouteError::NoSkill {
                at: route.declared_in.clone(),
                skill: route.skill.clone(),
                suggestion: index.closest(&route.skill).into_iter().next(),
            });
        }
        let key = (route.method.to_string(), route.path.clone());
        if let Some(first) = seen.insert(key, route.declared_in.clone()) {
            errors.push(RouteError::Duplicate {
                at: route.declared_in.clone(),
                method: route.method.clone(),
                pattern: route.pattern.clone(),
                first,
            });
        }
    }
    (routes, errors)
}

/// `{method, path, ref}`, or on a skill `"GET /path"` / `{method, path}` (ref: the skill).
fn parse(item: &Value, owner: Option<&Tool>, where_: &str) -> Result<WebRoute, RouteError> {
    let at = || where_.to_string();
    let (method, pattern, skill) = match item {
        Value::String(s) => {
            let (m, p) = s
                .split_once(' ')
                .ok_or_else(|| RouteError::NotMethodAndPath {
                    at: at(),
                    found: s.clone(),
                })?;
            (m.to_string(), p.trim().to_string(), None)
        }
        Value::Object(map) => {
            let get = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_string);
            (
                get("method").unwrap_or_else(|| "GET".into()),
                get("path").ok_or_else(|| RouteError::NoPath { at: at() })?,
                get("ref"),
            )
        }
        _ => return Err(RouteError::NotAnObject { at: at() }),
    };
    let skill = match (skill, owner) {
        (Some(s), _) => s,
        (None, Some(tool)) => tool.name.clone(),
        (None, None) => return Err(RouteError::NoRef { at: at() }),
    };
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())
        .map_err(|_| RouteError::BadMethod { at: at(), method })?;
    if !pattern.starts_with('/') {
        return Err(RouteError::RelativePath { at: at(), pattern });
    }
    let path = pattern
        .split('/')
        .map(|seg| match (seg.strip_prefix(':'), seg.strip_prefix('*')) {
            (Some(name), _) => format!("{{{name}}}"),
            (_, Some(name)) if !name.is_empty() => format!("{{*{name}}}"),
            _ => seg.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/");
    Ok(WebRoute {
        method,
        pattern,
        path,
        skill,
        declared_in: where_.to_string(),
    })
}

/// Adds the routes to `router`.
pub fn mount(mut router: Router<AppState>, routes: &[WebRoute]) -> Router<AppState> {
    let mut by_path: HashMap<&str, Vec<&WebRoute>> = HashMap::new();
    for route in routes {
        by_path.entry(route.path.as_str()).or_default().push(route);
    }
    for (path, list) in by_path {
        let mut method_router = axum::routing::MethodRouter::new();
        for route in list {
            let filter = MethodFilter::try_from(route.method.clone()).unwrap_or(MethodFilter::GET);
            let route = Arc::new(route.clone());
            method_router = method_router.merge(on(filter, move |state, params, req| {
                handle(state, params, req, route.clone())
            }));
        }
        router = router.route(path, method_router);
    }
    router
}

async fn handle(
    State(state): State<AppState>,
    params: RawPathParams,
    req: Request,
    route: Arc<WebRoute>,
) -> Result<Response, GatewayError> {
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .map_or_else(String::new, |r| r.0.clone());
    let caller = req.extensions().get::<Caller>().cloned();
    let client = req
        .extensions()
        .get::<crate::gateway::peers::ClientAddr>()
        .map(|c| c.0);
    state
        .policy
        .reach_routed(&route.skill, Caller::scope(caller.as_ref()))?;
    let web_session =
        WebSession::of(&state.sessions, req.headers(), crate::context::id::now_ms()).await;
    // The project declared the route: its skill runs as the project's code serving the caller
    // (a visitor of a public route without a key is its signed session).
    let principal = match &caller {
        Some(Caller::Anonymous) => {
            crate::gateway::principal::peer(&format!("web:{}", web_session.id))
        }
        other => Caller::principal(other.as_ref()),
    };
    let authority = Authority::serving(principal);
    let params: Map<String, Value> = params
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    let query = Query::<HashMap<String, String>>::try_from_uri(req.uri())
        .map(|q| json!(q.0))
        .unwrap_or_else(|_| json!({}));
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let headers = req.headers().clone();
    // Read as `/invoke` reads it: within the body limit and the body timeout.
    let body = Bytes::from_request(req, &state)
        .await
        .map_err(|rejection| body::rejected(&rejection, state.config.body_limit))?;
    let body = body_value(&headers, &body)?;
    let args = json!({
        "route": route.pattern,
        "query": query,
        "body": body,
        "headers": headers_json(&headers),
        "method": method,
        "path": path,
        "params": params,
        "sessionId": web_session.id,
    });
    let inbound = Inbound {
        transport: "http",
        skill: ToolRef::Name(Arc::from(route.skill.as_str())),
        tool: None,
        authority,
        announce: state.config.announce.then(|| args.clone()),
        request: request_fields(&method, &path, &headers, &query),
        args,
        request_id: request_id.clone(),
        reply_to: Value::Null,
        follow: false,
        duplex: false,
        session: Some(web_session.conversation()),
        timeout: Some(state.config.timeout),
        client,
    };
    let dispatch = state.gateway.dispatch(inbound);
    let behind_tls = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let set_cookie = web_session.set_cookie(behind_tls);
    let mut response = respond(
        dispatch,
        &route.skill,
        &request_id,
        |result, _| match result {
            Value::Null => StatusCode::NO_CONTENT.into_response(),
            Value::String(html) => Html(html).into_response(),
            other => axum::Json(other).into_response(),
        },
    )
    .await;
    if let Some(cookie) = set_cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// JSON bodies parsed (malformed is a 400), other bodies as text, none as null.
fn body_value(headers: &HeaderMap, body: &[u8]) -> Result<Value, GatewayError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
    if is_json {
        serde_json::from_slice(body).map_err(|err| GatewayError::malformed_json(&err))
    } else {
        Ok(Value::String(String::from_utf8_lossy(body).into_owned()))
    }
}
