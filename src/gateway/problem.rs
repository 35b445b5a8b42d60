//! Problem details (RFC 9457): how HTTP answers a [`GatewayError`]. Every HTTP error is an
//! `application/problem+json` body with a status, a stable `type` (the error's slug), a title and
//! a detail a user can act on. This file is the one place a gateway error becomes a status and a
//! document; handlers return `GatewayError` and never build one themselves.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::gateway::error::{GatewayError, Missing};

pub const CONTENT_TYPE: &str = "application/problem+json";

/// A problem document.
#[derive(Debug, Clone)]
pub struct Problem {
    status: StatusCode,
    /// The `type` URI points at the slug's section of the docs page.
    slug: &'static str,
    detail: String,
    extra: Map<String, Value>,
}

/// The HTTP status of each problem type (the pairs of `PROBLEMS`).
pub(crate) fn status(err: &GatewayError) -> StatusCode {
    match err {
        GatewayError::BadRequest(_) | GatewayError::MalformedJson { .. } => StatusCode::BAD_REQUEST,
        GatewayError::Unauthorized { .. } | GatewayError::BadSignature(_) => {
            StatusCode::UNAUTHORIZED
        }
        GatewayError::CrossSite(_) | GatewayError::Denied { .. } => StatusCode::FORBIDDEN,
        GatewayError::NotFound(_) => StatusCode::NOT_FOUND,
        GatewayError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
        GatewayError::BodyTimeout { .. } | GatewayError::BodyStalled { .. } => {
            StatusCode::REQUEST_TIMEOUT
        }
        GatewayError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        GatewayError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        GatewayError::Misdirected { .. } => StatusCode::MISDIRECTED_REQUEST,
        GatewayError::KeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        GatewayError::InProgress(_) => StatusCode::CONFLICT,
        GatewayError::Gone(_) => StatusCode::GONE,
        GatewayError::NotRetryable(_) => StatusCode::CONFLICT,
        GatewayError::InvalidArgs { .. } | GatewayError::OverBudget { .. } => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        GatewayError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        GatewayError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        GatewayError::Aborted { .. } | GatewayError::Unavailable(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        GatewayError::Upstream { .. } => StatusCode::BAD_GATEWAY,
        GatewayError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
    }
}

impl Problem {
    /// The document for `err`: its status, slug and public detail, and the members a client
    /// can act on (field errors, suggestions, limits, the run's skill and request id).
    pub fn of(err: &GatewayError) -> Problem {
        let mut extra = Map::new();
        let mut put = |key: &str, value: Value| {
            extra.insert(key.to_string(), value);
        };
        match err {
            GatewayError::MalformedJson {
                at: Some((line, column)),
                ..
            } => {
                put("line", json!(line));
                put("column", json!(column));
            }
            GatewayError::NotFound(Missing::Skill { name, suggestions }) => {
                put("skill", json!(name));
                if let Some(suggestions) = suggestions {
                    put("suggestions", json!(suggestions));
                }
            }
            GatewayError::BodyTimeout { timeout } => put("timeout", json!(timeout.as_secs_f64())),
            GatewayError::BodyStalled { rate, .. } => put("minRate", json!(rate)),
            GatewayError::TooLarge { limit } => put("limit", json!(limit)),
            GatewayError::InvalidArgs { errors, .. } => put("errors", (**errors).clone()),
            GatewayError::RateLimited { wait } => put("retryAfter", json!(wait)),
            _ => {}
        }
        if let Some(run) = err.run() {
            put("skill", json!(run.skill));
            put("requestId", json!(run.request_id));
        }
        Problem {
            status: status(err),
            slug: err.slug(),
            detail: err.public_detail().into_owned(),
            extra,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn to_json(&self) -> Value {
        let mut body = json!({
            "type": format!("/docs#problem-{}", self.slug),
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Value::Object(map) = &mut body {
            map.extend(self.extra.clone());
        }
        body
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let problem = Problem::of(&self);
        let body = serde_json::to_vec(&problem.to_json()).unwrap_or_default();
        let mut response = (problem.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        match self {
            GatewayError::Unauthorized { .. } => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"skillgate\""),
                );
            }
            GatewayError::RateLimited { wait } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(wait.max(1)));
            }
            // Busy or shutting down: another replica, or this one in a moment.
            GatewayError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(1));
            }
            _ => {}
        }
        response
    }
}

/// Problem types the gateway answers with: slug, status, meaning. Each is a variant of
/// `GatewayError`; a test in `problem` keeps the two the same.
pub const PROBLEMS: [(&str, u16, &str); 24] = [
    ("bad-request", 400, "The request could not be read."),
    (
        "malformed-json",
        400,
        "The body is not a JSON object (the detail says where parsing stopped).",
    ),
    (
        "unauthorized",
        401,
        "The path needs an API key: `Authorization: Bearer <key>`, and the key presented is missing or not valid.",
    ),
    (
        "cross-site",
        403,
        "A browser on another site sent the request (`Origin`, `Sec-Fetch-Site`) and its origin is not in `cors-origins`.",
    ),
    (
        "denied",
        403,
        "A policy refused the call: the API key may not invoke this skill, or a policy (allowed-tools, untrusted refs, reserved topics) refused a call the skill made.",
    ),
    ("not-found", 404, "No visible skill or route has this name."),
    (
        "method-not-allowed",
        405,
        "The path exists but not for this method.",
    ),
    (
        "body-timeout",
        408,
        "The request body did not arrive within the body timeout of its headers, or, a body over 16 KiB, stopped arriving at its pace (what it holds, its length or for a body of unknown length the body limit, over the body timeout, after a sixth of it) while it held room in the receive budget (`minRate`: the bytes a second it needed).",
    ),
    (
        "too-large",
        413,
        "The body is larger than the configured limit.",
    ),
    (
        "unsupported-media-type",
        415,
        "A body was sent without `Content-Type: application/json`.",
    ),
    (
        "misdirected",
        421,
        "The request is addressed to a host the server does not answer for (`allowed-hosts`).",
    ),
    (
        "invalid-args",
        422,
        "The args fail the skill's params schema, or use `$`-prefixed keys (invoke options are not for callers); `errors` lists each failing field path or refused key.",
    ),
    (
        "over-budget",
        422,
        "The run went over its budget (skill invocations, bytes of args and results, or time: `--max-run-invocations`, `--max-run-bytes`, `--max-run-time`); what was asked needs more than one run may spend.",
    ),
    (
        "bad-signature",
        401,
        "A webhook delivery without a valid signature for its route (missing or malformed headers, a timestamp more than the tolerance away, or a signature that does not match). Nothing was queued.",
    ),
    (
        "in-progress",
        409,
        "A request with this `Idempotency-Key` has not answered yet (here or on another replica), or its answer was a response the skill wrote itself with `web-send`, which is not replayed.",
    ),
    (
        "not-retryable",
        409,
        "The recorded run cannot be run again as it was: its args were redacted or cut in the record, it started longer ago than the retry window (`--retry-window`), or the key it ran for is revoked.",
    ),
    (
        "stream-expired",
        410,
        "The streamed run this `Idempotency-Key` started is over and its frames have left the event buffer; it cannot be resumed or replayed.",
    ),
    (
        "idempotency-key-reused",
        422,
        "This `Idempotency-Key` was used for a request with another skill or body.",
    ),
    (
        "rate-limited",
        429,
        "Too many requests for this key or client; `Retry-After` says when to try again.",
    ),
    (
        "internal",
        500,
        "The skill could not run. The cause is in the server log under the request id.",
    ),
    (
        "upstream-unavailable",
        502,
        "A service the skill depends on (an MCP server it mounts, its model vendor) could not be reached, was overloaded or did not answer in time. Which one is in the server log under the request id; try again later.",
    ),
    (
        "aborted",
        503,
        "The run was aborted (the server is shutting down).",
    ),
    (
        "unavailable",
        503,
        "The server cannot take this now: all WebSocket connections are in use, or it is shutting down. Try again later.",
    ),
    (
        "timeout",
        504,
        "The skill did not finish within the configured timeout and was aborted.",
    ),
];

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::{ErrorKind, SkillError};
    use crate::gateway::error::RunRef;

    fn run() -> RunRef {
        RunRef {
            skill: "hello".into(),
            request_id: "r1".into(),
        }
    }

    /// One error of every problem type.
    fn every() -> Vec<GatewayError> {
        vec![
            GatewayError::BadRequest("unreadable".into()),
            GatewayError::MalformedJson {
                detail: "bad".into(),
                at: Some((1, 2)),
            },
            GatewayError::Unauthorized { presented: false },
            GatewayError::CrossSite("other site".into()),
            GatewayError::Denied {
                message: "no".into(),
                run: None,
            },
            GatewayError::NotFound(Missing::Path("/x".into())),
            GatewayError::MethodNotAllowed { path: "/x".into() },
            GatewayError::BodyTimeout {
                timeout: Duration::from_secs(1),
            },
            GatewayError::BodyStalled {
                rate: 1024,
                grace: Duration::from_secs(5),
            },
            GatewayError::TooLarge { limit: 64 },
            GatewayError::UnsupportedMediaType { got: None },
            GatewayError::Misdirected { host: None },
            GatewayError::InvalidArgs {
                message: "bad".into(),
                errors: Box::new(json!([])),
                run: run(),
            },
            GatewayError::RateLimited { wait: 2 },
            GatewayError::Timeout {
                message: "slow".into(),
                run: run(),
            },
            GatewayError::Aborted {
                message: "stopped".into(),
                run: run(),
            },
            GatewayError::OverBudget {
                message: "too much".into(),
                run: run(),
            },
            GatewayError::Unavailable("full".into()),
            GatewayError::Upstream {
                cause: "MCP server down".into(),
                run: run(),
            },
            GatewayError::KeyReused("again".into()),
            GatewayError::BadSignature("stale".into()),
            GatewayError::InProgress("running".into()),
            GatewayError::Gone("expired".into()),
            GatewayError::NotRetryable("redacted".into()),
            GatewayError::Internal {
                cause: "boom".into(),
                run: Some(run()),
            },
        ]
    }

    #[test]
    fn every_problem_type_is_documented_with_its_status_and_every_documented_one_answered() {
        let answered: Vec<(&str, u16)> = every()
            .iter()
            .map(|e| (e.slug(), Problem::of(e).status().as_u16()))
            .collect();
        for pair in &answered {
            assert!(
                PROBLEMS
                    .iter()
                    .any(|(slug, status, _)| (*slug, *status) == *pair),
                "{pair:?} is not in PROBLEMS"
            );
        }
        for (slug, status, _) in PROBLEMS {
            assert!(
                answered.contains(&(slug, status)),
                "{slug} ({status}) is documented but never answered"
            );
        }
    }

    #[test]
    fn internal_causes_never_reach_the_body() {
        let secret = "connection to db-internal-7.corp:5432 refused (password=hunter2)";
        for kind in ErrorKind::ALL {
            let err = SkillError::new(kind, secret)
                .with_tool("hello")
                .with_data(json!({ "errors": [], "detail": secret }));
            let answer = GatewayError::from_run(&err, "hello", "r1");
            let body = Problem::of(&answer).to_json().to_string();
            if answer.slug() == "internal" {
                assert!(!body.contains("hunter2"), "{kind:?}: {body}");
                assert!(body.contains("\"requestId\":\"r1\""), "{body}");
            }
        }
        let bare = GatewayError::Internal {
            cause: secret.into(),
            run: None,
        };
        assert!(!Problem::of(&bare).to_json().to_string().contains("hunter2"));
    }

    #[test]
    fn a_run_failure_carries_the_skill_the_request_id_and_its_members() {
        let err = SkillError::new(ErrorKind::InvalidArgs, "`name` is missing")
            .with_data(json!({ "errors": [{ "path": "/name", "message": "required" }] }));
        let body = Problem::of(&GatewayError::from_run(&err, "hello", "r1")).to_json();
        assert_eq!(body["status"], 422);
        assert_eq!(body["type"], "/docs#problem-invalid-args");
        assert_eq!(body["title"], "Unprocessable Entity");
        assert_eq!(body["detail"], "`name` is missing");
        assert_eq!(body["errors"][0]["path"], "/name");
        assert_eq!(body["skill"], "hello");
        assert_eq!(body["requestId"], "r1");
    }

    #[test]
    fn the_response_is_problem_json_with_the_headers_its_type_needs() {
        let response = GatewayError::Unauthorized { presented: true }.into_response();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        assert!(response.headers().contains_key(header::WWW_AUTHENTICATE));
        let response = GatewayError::RateLimited { wait: 0 }.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
