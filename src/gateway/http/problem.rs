//! Problem details (RFC 9457): every HTTP error is an `application/problem+json` body with a
//! status, a stable `type`, a title and a detail a user can act on.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::error::{ErrorKind, SkillError};

pub const CONTENT_TYPE: &str = "application/problem+json";

#[derive(Debug, Clone)]
pub struct Problem {
    pub status: u16,
    /// A short slug; the `type` URI points at its section of the docs page.
    pub slug: &'static str,
    pub detail: String,
    pub extra: Map<String, Value>,
}

impl Problem {
    pub fn new(status: u16, slug: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            slug,
            detail: detail.into(),
            extra: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: Value) -> Problem {
        self.extra.insert(key.to_string(), value);
        self
    }

    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(404, "not-found", detail)
    }

    pub fn to_json(&self) -> Value {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = json!({
            "type": format!("/docs#problem-{}", self.slug),
            "title": status.canonical_reason().unwrap_or("Error"),
            "status": self.status,
            "detail": self.detail,
        });
        if let Value::Object(map) = &mut body {
            map.extend(self.extra.clone());
        }
        body
    }

    /// The problem for a failed invocation of `skill`. Causes of a 500 (a skill's own `fail`
    /// included: its message may hold anything) stay in the log; the body is generic and
    /// carries the request id to find them. A skill that wants to answer with an error of its
    /// own sets the status with `web-send`.
    pub fn from_skill_error(err: &SkillError, skill: &str, request_id: &str) -> Problem {
        let own = err.tool() == Some(skill) || err.tool().is_none();
        let problem = match err.kind() {
            ErrorKind::InvalidArgs if own => {
                let errors = err
                    .data()
                    .and_then(|d| d.get("errors"))
                    .cloned()
                    .unwrap_or_else(|| json!([]));
                // The message names the fields (or the refused keys) and shows only what the
                // caller sent, so it can be shown.
                Problem::new(422, "invalid-args", err.message().to_string()).with("errors", errors)
            }
            ErrorKind::Denied => Problem::new(403, "denied", err.message().to_string()),
            ErrorKind::Aborted
                if err
                    .data()
                    .and_then(|d| d.get("timeout"))
                    .is_some_and(|t| t == true) =>
            {
                Problem::new(504, "timeout", err.message().to_string())
            }
            ErrorKind::Aborted => Problem::new(503, "aborted", err.message().to_string()),
            _ => {
                tracing::error!(request_id, skill, error = %err, kind = err.kind().code(), "invocation failed");
                Problem::new(
                    500,
                    "internal",
                    "the skill could not run; the cause is in the server log under this request id",
                )
            }
        };
        problem
            .with("skill", Value::String(skill.to_string()))
            .with("requestId", Value::String(request_id.to_string()))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_json()).unwrap_or_default();
        let mut response = (status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        response
    }
}
