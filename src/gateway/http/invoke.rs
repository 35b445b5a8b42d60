//! `POST /invoke/{skill}`: JSON args in, `{"result": ...}` out; with `Accept:
//! text/event-stream` the run's chunks, messages, log events and bus events stream as SSE and a
//! final `result` (or `error`) event closes the stream. A skill that takes the response over
//! with `web-send` answers with its own status, headers and streamed body. A stream sent with an
//! `Idempotency-Key` is recorded and resumable (`resume`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::Stream;
use serde_json::{Map, Value, json};

use crate::context::shape::Shape;
use crate::gateway::body;
use crate::gateway::error::RunRef;
use crate::gateway::headers::headers_json;
use crate::gateway::http::idempotency::{self, Begin};
use crate::gateway::http::request_id::RequestId;
use crate::gateway::http::resume;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::gateway::peers::ClientAddr;
use crate::gateway::problem::Problem;
use crate::gateway::reply::chunk_bytes;
use crate::gateway::{Dispatch, GatewayError, Inbound, ReplyPart};
use crate::kernel::ToolRef;
use crate::kernel::invoke::Output;

pub async fn invoke(
    State(state): State<AppState>,
    Path(skill): Path<String>,
    caller: Option<Extension<Caller>>,
    Extension(RequestId(request_id)): Extension<RequestId>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    let body = body.map_err(|rejection| body::rejected(&rejection, state.config.body_limit))?;
    let caller = caller.map(|Extension(caller)| caller);
    let index = state.gateway.kernel.registry().current();
    let tool = state
        .policy
        .reach(&index, &skill, Caller::scope(caller.as_ref()))?;
    if let Some(why) = crate::gateway::origin::refused(&headers, &state.config.cors_origins) {
        return Err(GatewayError::CrossSite(why));
    }
    json_content_type(&headers, &body)?;
    let args = parse_args(&body)?;
    let stream = wants_stream(&headers);
    let claim =
        match idempotency::begin(&state, caller.as_ref(), &skill, &headers, &body, stream).await? {
            Begin::None => None,
            Begin::Claimed(claim) => Some(claim),
            Begin::Replay(response) => return Ok(response),
            Begin::Resume { topic, over } => {
                return resume::follow(&state, &topic, over, &headers).await;
            }
        };
    let authority = state
        .policy
        .authority(&tool, Caller::principal(caller.as_ref()));
    let inbound = Inbound {
        transport: "http",
        skill: ToolRef::Name(Arc::from(tool.name.as_str())),
        tool: Some(tool),
        authority,
        announce: state
            .config
            .announce
            .then(|| json!({ "skill": skill, "args": args, "requestId": request_id })),
        args,
        request: request_fields("POST", &format!("/invoke/{skill}"), &headers, &Value::Null),
        request_id: request_id.clone(),
        reply_to: Value::Null,
        follow: stream,
        duplex: false,
        session: None,
        timeout: Some(state.config.timeout),
        client: client.map(|Extension(ClientAddr(ip))| ip),
    };
    let dispatch = state.gateway.dispatch(inbound);
    if stream {
        return match claim {
            Some(claim) => resume::record(&state, dispatch, claim, skill, request_id).await,
            None => Ok(sse(dispatch, skill, request_id).into_response()),
        };
    }
    let reply = dispatch.reply.clone();
    let response = respond(dispatch, &skill, &request_id, |result, messages| {
        let mut body = json!({ "result": result });
        if !messages.is_empty() {
            body["messages"] = Value::Array(messages);
        }
        Json(body).into_response()
    })
    .await;
    Ok(match claim {
        Some(claim) => claim.settle(&state, response, reply.is_raw()).await,
        None => response,
    })
}

/// True when the client asked for `text/event-stream`.
pub fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// `nonlocals.request` for an HTTP request: method, path, query, headers (lower-case names;
/// `authorization` and `cookie` left out).
pub fn request_fields(
    method: &str,
    path: &str,
    headers: &HeaderMap,
    query: &Value,
) -> Map<String, Value> {
    static FIELDS: Shape<4> = Shape::new(["method", "path", "query", "headers"]);
    FIELDS.object([
        Value::String(method.to_string()),
        Value::String(path.to_string()),
        query.clone(),
        headers_json(headers),
    ])
}

/// Args come as JSON, and the request must say so: a form another site posts (`text/plain`,
/// urlencoded, multipart) cannot invoke a skill. No body and no content type is no args.
fn json_content_type(headers: &HeaderMap, body: &[u8]) -> Result<(), GatewayError> {
    let declared = headers.get(header::CONTENT_TYPE);
    let json = declared
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if json || (declared.is_none() && is_blank(body)) {
        return Ok(());
    }
    Err(GatewayError::UnsupportedMediaType {
        got: declared.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
    })
}

fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

/// An empty body is `{}`; anything else must be a JSON object.
fn parse_args(body: &[u8]) -> Result<Value, GatewayError> {
    if is_blank(body) {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(Value::Object(map)),
        Ok(other) => Err(GatewayError::MalformedJson {
            detail: format!(
                "the body must be a JSON object of args, found {}",
                crate::context::path::kind(&other)
            ),
            at: None,
        }),
        Err(err) => Err(GatewayError::malformed_json(&err)),
    }
}

/// Answers a non-streaming request: `done(result, messages)` builds the response, unless the
/// skill took the response over with `web-send`, whose head and chunks are then the response.
pub async fn respond(
    mut dispatch: Dispatch,
    skill: &str,
    request_id: &str,
    done: impl FnOnce(Value, Vec<Value>) -> Response,
) -> Response {
    let mut messages = Vec::new();
    while let Some(part) = dispatch.parts.recv().await {
        match part {
            ReplyPart::Head { status, headers } => {
                return raw(dispatch, status, headers, None, skill, request_id);
            }
            ReplyPart::Chunk(chunk) => {
                return raw(dispatch, 200, Vec::new(), Some(chunk), skill, request_id);
            }
            ReplyPart::Message(message) => messages.push(message),
            ReplyPart::Log(_) | ReplyPart::Event(_) | ReplyPart::Partial(_) | ReplyPart::Gap(_) => {
            }
            ReplyPart::Done(Ok(result)) => return done(output(result), messages),
            ReplyPart::Done(Err(err)) => {
                return GatewayError::from_run(&err, skill, request_id).into_response();
            }
        }
    }
    let cause = "the run ended without an answer";
    tracing::error!(request_id, skill, "{cause}");
    GatewayError::Internal {
        cause: cause.to_string(),
        run: Some(RunRef {
            skill: skill.to_string(),
            request_id: request_id.to_string(),
        }),
    }
    .into_response()
}

fn output(result: Output) -> Value {
    result.map_or(Value::Null, Arc::unwrap_or_clone)
}

/// The response `web-send` writes: its head, then the chunks as they come.
fn raw(
    dispatch: Dispatch,
    status: u16,
    headers: Vec<(String, String)>,
    first: Option<Value>,
    skill: &str,
    request_id: &str,
) -> Response {
    // `web-send` refuses informational statuses; one that got here anyway would end the
    // connection instead of answering.
    let status = StatusCode::from_u16(status)
        .ok()
        .filter(|s| !s.is_informational())
        .unwrap_or_else(|| {
            tracing::error!(skill, request_id, status, "web-send: not a final status");
            StatusCode::INTERNAL_SERVER_ERROR
        });
    let mut builder = Response::builder().status(status);
    let mut typed = false;
    for (name, value) in headers {
        match (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            (Ok(name), Ok(value)) => {
                typed |= name == header::CONTENT_TYPE;
                builder = builder.header(name, value);
            }
            _ => {
                tracing::warn!(skill, request_id, header = %name, "web-send: skipped an invalid header")
            }
        }
    }
    if !typed {
        let json = first.as_ref().is_some_and(|c| !c.is_string());
        builder = builder.header(
            header::CONTENT_TYPE,
            if json {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            },
        );
    }
    let skill = skill.to_string();
    let request_id = request_id.to_string();
    let stream = futures::stream::unfold(
        (dispatch, first, skill, request_id),
        |(mut dispatch, first, skill, request_id)| async move {
            if let Some(chunk) = first {
                return Some((
                    Ok::<_, Infallible>(chunk_bytes(chunk)),
                    (dispatch, None, skill, request_id),
                ));
            }
            loop {
                match dispatch.parts.recv().await? {
                    ReplyPart::Chunk(chunk) => {
                        return Some((Ok(chunk_bytes(chunk)), (dispatch, None, skill, request_id)));
                    }
                    ReplyPart::Done(Err(err)) => {
                        tracing::error!(skill, request_id, error = %err, "the skill failed after its response started");
                        return None;
                    }
                    ReplyPart::Done(Ok(_)) => return None,
                    _ => {}
                }
            }
        },
    );
    builder
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A run's part as an SSE frame: its event name, its data, and whether it is the last one
/// (`None` for parts a stream does not carry).
pub fn frame(
    part: ReplyPart,
    skill: &str,
    request_id: &str,
) -> Option<(&'static str, Value, bool)> {
    Some(match part {
        ReplyPart::Chunk(chunk) => ("chunk", chunk, false),
        ReplyPart::Partial(text) => ("chunk", Value::String(text), false),
        ReplyPart::Message(message) => ("message", message, false),
        ReplyPart::Log(log) => ("log", (*log).clone(), false),
        ReplyPart::Event(event) => ("event", event, false),
        ReplyPart::Gap(missed) => ("gap", json!({ "missed": missed }), false),
        ReplyPart::Head { .. } => return None,
        ReplyPart::Done(Ok(result)) => ("result", json!({ "result": output(result) }), true),
        ReplyPart::Done(Err(err)) => (
            "error",
            Problem::of(&GatewayError::from_run(&err, skill, request_id)).to_json(),
            true,
        ),
    })
}

/// The SSE stream of a run.
fn sse(
    dispatch: Dispatch,
    skill: String,
    request_id: String,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let stream = futures::stream::unfold(Some((dispatch, 0u64)), move |state| {
        let skill = skill.clone();
        let request_id = request_id.clone();
        async move {
            let (mut dispatch, seq) = state?;
            loop {
                let part = dispatch.parts.recv().await?;
                let Some((name, data, last)) = frame(part, &skill, &request_id) else {
                    continue;
                };
                let event = SseEvent::default()
                    .event(name)
                    .id(seq.to_string())
                    .data(data.to_string());
                let next = (!last).then_some((dispatch, seq + 1));
                return Some((Ok(event), next));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
