//! The web console at `/console`: the runs record as pages (a live runs list, a run with its
//! onion as a waterfall, dead letters), with a retry and a replay button for an `admin` key.
//! It logs in with an API key into a signed cookie ([`login`]) and sees what that key sees
//! through the API; with keys off (loopback) it is the local caller's, with no login. Every
//! form carries the login's CSRF token and is refused from another site.

mod login;
mod pages;
mod posted;
mod skills;
mod status;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;
use serde::Deserialize;
use serde_json::Value;

use crate::context::id::now_ms;
use crate::events::KernelBus;
use crate::events::dead;
use crate::events::runs::{self, RunsQuery};
use crate::gateway::http::runs::{seen_by, shown_to, start_retry};
use crate::gateway::http::runs_stream;
use crate::gateway::http::state::{AppState, StreamEnd};
use crate::gateway::reply::gather;
use login::Login;
use pages::{Filters, Viewer};
use posted::Posted;

/// The console's prefix: requests under it authenticate with the console's login, not a key.
pub const PREFIX: &str = "/console";

/// Whether `path` is the console's.
pub fn serves(path: &str) -> bool {
    path == PREFIX || path.starts_with("/console/")
}

/// What the pages allow: their own styles and script, connections to the server, forms to it.
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(runs_page))
        .route("/console/login", get(login_page).post(log_in))
        .route("/console/logout", post(log_out))
        .route("/console/runs/{id}", get(run_page))
        .route("/console/runs/{id}/retry", post(retry))
        .route("/console/dead", get(dead_page))
        .route("/console/dead/{id}/replay", post(replay))
        .route("/console/stream", get(stream))
        .route("/console/status", get(status::show))
        .route("/console/skills", get(skills::list))
        .route("/console/skills/{name}", get(skills::show))
        .route("/console/skills/{name}/try", post(skills::try_it))
        .route("/console/console.css", get(css))
        .route("/console/live.js", get(script))
}

/// A page with the console's headers (and the login cookie to set, if any).
fn page(status: StatusCode, markup: Markup, cookie: Option<HeaderValue>) -> Response {
    let mut response = (status, markup).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(cookie) = cookie {
        headers.insert(header::SET_COOKIE, cookie);
    }
    response
}

/// `pairs` with a value as a query string, each part percent-encoded.
fn query_string(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    pairs
        .iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| format!("{name}={}", encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

fn behind_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

/// Who is looking: the login of the request's cookie; with keys off, the local caller (a new
/// login, whose cookie the page sets); else the way to the login page.
async fn looking(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(Login, Option<HeaderValue>), Response> {
    let keys = &state.config.keys;
    let now = now_ms();
    if let Some(login) = login::read(&state.sessions, keys, headers, now).await {
        return Ok((login, None));
    }
    if keys.is_empty()
        && let Some((value, login)) = login::issue(&state.sessions, None, now).await
    {
        return Ok((login, login::set_cookie(&value, behind_tls(headers))));
    }
    Err(Redirect::to("/console/login").into_response())
}

/// The login of a form post, if its cookie is one and its CSRF token and origin hold.
async fn acting(state: &AppState, headers: &HeaderMap, csrf: &str) -> Result<Login, Response> {
    if let Some(why) = crate::gateway::origin::refused(headers, &[]) {
        return Err(page(
            StatusCode::FORBIDDEN,
            pages::problem(None, "Refused", &why),
            None,
        ));
    }
    let login = login::read(&state.sessions, &state.config.keys, headers, now_ms()).await;
    match login {
        Some(login) if login.csrf_ok(csrf) => Ok(login),
        Some(_) => Err(page(
            StatusCode::FORBIDDEN,
            pages::problem(
                None,
                "Refused",
                "The form did not carry this login's CSRF token; reload the page and try again.",
            ),
            None,
        )),
        None => Err(Redirect::to("/console/login").into_response()),
    }
}

/// The refusal of an admin-only page or action to a login without `admin`; `None` for an
/// admin.
fn admin_only(viewer: &Viewer<'_>, why: &str, cookie: &Option<HeaderValue>) -> Option<Response> {
    (!viewer.admin).then(|| {
        let body = pages::problem(Some(viewer), "Admin only", why);
        page(StatusCode::FORBIDDEN, body, cookie.clone())
    })
}

fn viewer_of<'a>(login: &'a Login, principal: &'a str) -> Viewer<'a> {
    Viewer {
        principal,
        admin: login.admin(),
        csrf: &login.csrf,
        keyed: login.key.is_some(),
    }
}

#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    #[serde(default)]
    door: String,
    #[serde(default)]
    skill: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    q: String,
    cursor: Option<String>,
    /// A dead letter just replayed (said at the top of the list).
    replayed: Option<String>,
}

async fn runs_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let (login, cookie) = match looking(&state, &headers).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    let Ok(Query(query)) = query else {
        let body = pages::problem(
            Some(&viewer),
            "Bad filter",
            "The filters could not be read.",
        );
        return page(StatusCode::BAD_REQUEST, body, cookie);
    };
    let asked = RunsQuery {
        door: Some(query.door.clone()),
        skill: Some(query.skill.clone()),
        status: Some(query.status.clone()).filter(|s| !s.is_empty()),
        q: Some(query.q.clone()),
        cursor: query.cursor.clone(),
        ..RunsQuery::default()
    };
    let mut filter = match asked.filter() {
        Ok(filter) => filter,
        Err(why) => {
            let body = pages::problem(Some(&viewer), "Bad filter", &why);
            return page(StatusCode::BAD_REQUEST, body, cookie);
        }
    };
    filter.principal = seen_by(login.caller().as_ref()).ok().flatten();
    let found = match state.gateway.kernel.bus().store().runs(&filter).await {
        Ok(found) => found,
        Err(err) => {
            tracing::warn!(error = %err, "the console could not read the runs record");
            let body = pages::problem(
                Some(&viewer),
                "Unavailable",
                "The runs record could not be read; see the server log.",
            );
            return page(StatusCode::SERVICE_UNAVAILABLE, body, cookie);
        }
    };
    let listed = runs::page(&found, filter.limit);
    let next = listed["next"].as_str().map(|cursor| {
        let given = [
            ("door", query.door.as_str()),
            ("skill", query.skill.as_str()),
            ("status", query.status.as_str()),
            ("q", query.q.as_str()),
            ("cursor", cursor),
        ];
        format!("/console?{}", query_string(&given))
    });
    let notice = query.replayed.as_ref().map(|id| {
        format!("Dead letter {id} was put back into its queue; its run appears here once it ends.")
    });
    let filters = Filters {
        door: &query.door,
        skill: &query.skill,
        status: &query.status,
        q: &query.q,
    };
    let body = pages::runs(
        &viewer,
        &listed,
        &filters,
        next,
        notice.as_deref(),
        query.cursor.is_none(),
    );
    page(StatusCode::OK, body, cookie)
}

async fn run_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (login, cookie) = match looking(&state, &headers).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    let own = seen_by(login.caller().as_ref()).ok().flatten();
    let found = state.gateway.kernel.bus().store().run(&id).await;
    let run = match found {
        Ok(Some(run)) if own.as_ref().is_none_or(|own| *own == run.principal) => run,
        Ok(_) if id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            return page(StatusCode::NOT_FOUND, pages::pending(&viewer, &id), cookie);
        }
        Ok(_) => {
            let body = pages::problem(
                Some(&viewer),
                "Not found",
                &format!("No run `{id}` of yours is recorded."),
            );
            return page(StatusCode::NOT_FOUND, body, cookie);
        }
        Err(err) => {
            tracing::warn!(error = %err, "the console could not read the runs record");
            let body = pages::problem(
                Some(&viewer),
                "Unavailable",
                "The runs record could not be read; see the server log.",
            );
            return page(StatusCode::SERVICE_UNAVAILABLE, body, cookie);
        }
    };
    let shown = shown_to(&run, login.caller().as_ref());
    page(StatusCode::OK, pages::run(&viewer, &shown), cookie)
}

#[derive(Debug, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn retry(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Posted(form): Posted<CsrfForm>,
) -> Response {
    let login = match acting(&state, &headers, &form.csrf).await {
        Ok(login) => login,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    match start_retry(&state, login.caller().as_ref(), &id).await {
        Ok(mut started) => {
            let new_id = started.dispatch.root_id.clone();
            // The run ends before the page shows it (its record follows within moments).
            gather(&mut started.dispatch.parts).await;
            Redirect::to(&format!("/console/runs/{new_id}")).into_response()
        }
        Err(err) => {
            let status = crate::gateway::problem::status(&err);
            let body = pages::problem(Some(&viewer), "Not retried", &err.public_detail());
            page(status, body, None)
        }
    }
}

async fn dead_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let (login, cookie) = match looking(&state, &headers).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    if let Some(refused) = admin_only(
        &viewer,
        "Dead letters hold every door's payloads: log in with an `admin` key.",
        &cookie,
    ) {
        return refused;
    }
    match dead::list(state.gateway.kernel.bus().store(), 500).await {
        Ok(letters) => {
            let letters: Vec<Value> = letters.iter().map(dead::DeadLetter::to_json).collect();
            page(StatusCode::OK, pages::dead(&viewer, &letters), cookie)
        }
        Err(err) => {
            tracing::warn!(error = %err, "the console could not read the dead letters");
            let body = pages::problem(
                Some(&viewer),
                "Unavailable",
                "The dead letters could not be read; see the server log.",
            );
            page(StatusCode::SERVICE_UNAVAILABLE, body, cookie)
        }
    }
}

async fn replay(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Posted(form): Posted<CsrfForm>,
) -> Response {
    let login = match acting(&state, &headers, &form.csrf).await {
        Ok(login) => login,
        Err(response) => return response,
    };
    let principal = login.principal();
    let viewer = viewer_of(&login, principal.id());
    if let Some(refused) = admin_only(
        &viewer,
        "Replaying a dead letter needs an `admin` key.",
        &None,
    ) {
        return refused;
    }
    match dead::replay(state.gateway.kernel.bus().store(), &id).await {
        Ok(letter) => {
            tracing::info!(letter = %id, topic = %letter.topic, queue = %letter.queue, "dead letter replayed from the console");
            let to = format!("/console?{}", query_string(&[("replayed", &id)]));
            Redirect::to(&to).into_response()
        }
        Err(err) => {
            let status = match err {
                dead::ReplayError::Missing(_) => StatusCode::NOT_FOUND,
                dead::ReplayError::Unreadable(_) => StatusCode::BAD_REQUEST,
                dead::ReplayError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            let body = pages::problem(Some(&viewer), "Not replayed", &err.to_string());
            page(status, body, None)
        }
    }
}

async fn stream(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let login = login::read(&state.sessions, &state.config.keys, &headers, now_ms()).await;
    let Some(login) = login else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let caller = login.caller();
    let own = seen_by(caller.as_ref()).ok().flatten();
    let until = StreamEnd::of(&state, caller.as_ref());
    runs_stream::follow(&state, own, until)
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    key: String,
}

async fn login_page(State(state): State<AppState>) -> Response {
    if state.config.keys.is_empty() {
        return Redirect::to("/console").into_response();
    }
    page(StatusCode::OK, pages::login(None), None)
}

async fn log_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    Posted(form): Posted<LoginForm>,
) -> Response {
    if let Some(why) = crate::gateway::origin::refused(&headers, &[]) {
        return page(StatusCode::FORBIDDEN, pages::login(Some(&why)), None);
    }
    let Some(key) = state.config.keys.verify(form.key.trim()).cloned() else {
        let why = if state.config.keys.is_empty() {
            "Keys are off: the console needs no login here."
        } else {
            "That key is not one of this server's."
        };
        return page(StatusCode::UNAUTHORIZED, pages::login(Some(why)), None);
    };
    let Some((value, _)) = login::issue(&state.sessions, Some(&key), now_ms()).await else {
        let why =
            "The login could not be signed (the store holding the session secret is unavailable).";
        return page(
            StatusCode::SERVICE_UNAVAILABLE,
            pages::login(Some(why)),
            None,
        );
    };
    tracing::info!(key = %key.name, "console login");
    let mut response = Redirect::to("/console").into_response();
    if let Some(cookie) = login::set_cookie(&value, behind_tls(&headers)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn log_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    Posted(form): Posted<CsrfForm>,
) -> Response {
    if let Err(response) = acting(&state, &headers, &form.csrf).await {
        return response;
    }
    let mut response = Redirect::to("/console/login").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, login::clear_cookie());
    response
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("console.css"))
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("live.js"))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=300"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}
