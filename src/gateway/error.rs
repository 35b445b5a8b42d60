//! What the gateway answers instead of a result: one variant a problem type, the same for every
//! transport. Its `Display` is the detail a caller may read, except for [`GatewayError::Internal`],
//! whose cause is for the log only ([`GatewayError::public_detail`] is what callers get). HTTP
//! renders these as problem documents (`http::problem`); other transports in their own form.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::SkillError;
use crate::gateway::policy::{Failure, Refusal};

/// The run an error belongs to, so the caller can quote it and an operator find its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    pub skill: String,
    pub request_id: String,
}

/// What was not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// A skill the caller named; `suggestions` (when given) are close names it may reach.
    Skill {
        name: String,
        suggestions: Option<Vec<String>>,
    },
    /// A path nothing is served at.
    Path(String),
    /// A run the caller may see is not recorded under this id.
    Run(String),
    /// No dead letter has this id.
    Letter(String),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Skill { name, suggestions } => {
                write!(f, "no skill is named `{name}`")?;
                if let Some(first) = suggestions.as_ref().and_then(|s| s.first()) {
                    write!(f, "; did you mean `{first}`?")?;
                }
                Ok(())
            }
            Missing::Path(path) => write!(f, "nothing is served at `{path}`"),
            Missing::Run(id) => write!(f, "no run `{id}` of yours is recorded"),
            Missing::Letter(id) => write!(f, "no dead letter `{id}` (it may have been replayed)"),
        }
    }
}

/// Shown instead of the cause of an internal failure.
pub const INTERNAL_DETAIL: &str =
    "the skill could not run; the cause is in the server log under this request id";
/// Shown instead of the cause of a failure of a service the run depends on.
pub const UPSTREAM_DETAIL: &str = "a service this skill depends on could not be reached or did not answer; try again later (which one is in the server log under this request id)";
/// The same, for a failure outside any run.
pub const INTERNAL_DETAIL_NO_RUN: &str =
    "the request could not be answered; the cause is in the server log under this request id";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GatewayError {
    /// The request could not be read (the transport's own words).
    #[error("{0}")]
    BadRequest(String),
    /// The body is not JSON, or not the JSON object args must be; `at` is `(line, column)`
    /// where parsing stopped.
    #[error("{detail}")]
    MalformedJson {
        detail: String,
        at: Option<(usize, usize)>,
    },
    /// No credential, or one that is not valid (`presented`).
    #[error("{}", if *presented { "the API key is not valid" } else { "this path needs an API key: send `Authorization: Bearer <key>`" })]
    Unauthorized { presented: bool },
    /// A browser on another site sent the request; the detail says how it was told.
    #[error("{0}")]
    CrossSite(String),
    /// A policy refused: the caller's scope (before a run), or one a run met.
    #[error("{message}")]
    Denied {
        message: String,
        run: Option<RunRef>,
    },
    #[error("{0}")]
    NotFound(Missing),
    #[error("`{path}` does not answer this method")]
    MethodNotAllowed { path: String },
    #[error("the request body did not arrive within {:.1} s of its headers", .timeout.as_secs_f64())]
    BodyTimeout { timeout: Duration },
    /// A large body that held room in the receive budget stopped arriving at its pace.
    #[error("the request body stopped arriving: a body over 16 KiB holds room in the server's receive budget, so after its first {:.1} s it must keep arriving at {rate} bytes a second or more (what it holds, its length or for a body of unknown length the body limit, over the body timeout)", .grace.as_secs_f64())]
    BodyStalled { rate: u64, grace: Duration },
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// Args were sent in another form than JSON; `got` is the declared type, if any.
    #[error("the args must be sent as `Content-Type: application/json` (got {})", got.as_deref().map_or_else(|| "none".to_string(), |g| format!("`{g}`")))]
    UnsupportedMediaType { got: Option<String> },
    /// The request is for a host the server does not answer for (or names none).
    #[error("{}", match host { Some(host) => format!("this server does not answer for the host `{host}`"), None => "the request names no host (send a `Host` header)".to_string() })]
    Misdirected { host: Option<String> },
    /// The args fail the invoked skill's params; `errors` has one `{path, message}` a field
    /// (boxed: the other variants are smaller, and every `Result` carries the largest).
    #[error("{message}")]
    InvalidArgs {
        message: String,
        errors: Box<Value>,
        run: RunRef,
    },
    /// Too many requests; `wait` is the seconds until the next is taken.
    #[error("too many requests; try again in {wait} s")]
    RateLimited { wait: u64 },
    #[error("{message}")]
    Timeout { message: String, run: RunRef },
    #[error("{message}")]
    Aborted { message: String, run: RunRef },
    /// The run went over its budget.
    #[error("{message}")]
    OverBudget { message: String, run: RunRef },
    /// A webhook delivery whose signature does not hold (missing, malformed, stale, wrong).
    #[error("the delivery is not signed as this webhook expects: {0}")]
    BadSignature(String),
    /// An `Idempotency-Key` was sent again with another request.
    #[error("{0}")]
    KeyReused(String),
    /// The first request with this `Idempotency-Key` has not answered yet (here or on another
    /// replica), or its answer cannot be replayed.
    #[error("{0}")]
    InProgress(String),
    /// What the request asks for was kept for a while and is gone (a streamed run whose frames
    /// left the buffer).
    #[error("{0}")]
    Gone(String),
    /// The server cannot take this now (too many connections, shutting down); try later.
    #[error("{0}")]
    Unavailable(String),
    /// A recorded run that cannot be run again as it was (its args were redacted or cut, it is
    /// older than the retry window, its principal is gone); the message says which.
    #[error("{0}")]
    NotRetryable(String),
    /// A service the run depends on (an MCP server, a model vendor) could not be reached or did not answer.
    /// `cause` names it and is for the log: callers get [`UPSTREAM_DETAIL`].
    #[error("{cause}")]
    Upstream { cause: String, run: RunRef },
    /// The server failed. `cause` is for the log: callers get [`INTERNAL_DETAIL`].
    #[error("{cause}")]
    Internal { cause: String, run: Option<RunRef> },
}

impl GatewayError {
    /// The answer to a failed run of `skill`, classified by [`Failure::of`]. The cause of an
    /// internal failure (a skill's own `fail` included: its message may hold anything) is
    /// logged here with the request id, as the caller is told.
    pub fn from_run(err: &SkillError, skill: &str, request_id: &str) -> GatewayError {
        let run = RunRef {
            skill: skill.to_string(),
            request_id: request_id.to_string(),
        };
        let message = err.message().to_string();
        match Failure::of(err, skill) {
            Failure::InvalidArgs => GatewayError::InvalidArgs {
                message,
                errors: Box::new(
                    err.data()
                        .and_then(|d| d.get("errors"))
                        .cloned()
                        .unwrap_or_else(|| json!([])),
                ),
                run,
            },
            Failure::Denied => GatewayError::Denied {
                message,
                run: Some(run),
            },
            Failure::NotFound => GatewayError::NotFound(Missing::Skill {
                name: err
                    .data()
                    .and_then(|d| d.get("skill"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                suggestions: err
                    .data()
                    .and_then(|d| d.get("suggestions"))
                    .and_then(Value::as_array)
                    .map(|s| {
                        s.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    }),
            }),
            Failure::Timeout => GatewayError::Timeout { message, run },
            Failure::Aborted => GatewayError::Aborted { message, run },
            Failure::OverBudget => GatewayError::OverBudget { message, run },
            Failure::Busy => GatewayError::Unavailable(message),
            Failure::Upstream => {
                tracing::warn!(request_id, skill, error = %err, "a service the run depends on is unavailable");
                GatewayError::Upstream {
                    cause: message,
                    run,
                }
            }
            Failure::Internal => {
                tracing::error!(request_id, skill, error = %err, kind = err.kind().code(), "invocation failed");
                GatewayError::Internal {
                    cause: message,
                    run: Some(run),
                }
            }
        }
    }

    /// A body that is not JSON.
    pub fn malformed_json(err: &serde_json::Error) -> GatewayError {
        GatewayError::MalformedJson {
            detail: format!("the body is not valid JSON: {err}"),
            at: Some((err.line(), err.column())),
        }
    }

    /// The problem type: a stable slug callers and docs name it by.
    pub fn slug(&self) -> &'static str {
        match self {
            GatewayError::BadRequest(_) => "bad-request",
            GatewayError::MalformedJson { .. } => "malformed-json",
            GatewayError::Unauthorized { .. } => "unauthorized",
            GatewayError::CrossSite(_) => "cross-site",
            GatewayError::Denied { .. } => "denied",
            GatewayError::NotFound(_) => "not-found",
            GatewayError::MethodNotAllowed { .. } => "method-not-allowed",
            GatewayError::BodyTimeout { .. } | GatewayError::BodyStalled { .. } => "body-timeout",
            GatewayError::TooLarge { .. } => "too-large",
            GatewayError::UnsupportedMediaType { .. } => "unsupported-media-type",
            GatewayError::Misdirected { .. } => "misdirected",
            GatewayError::InvalidArgs { .. } => "invalid-args",
            GatewayError::RateLimited { .. } => "rate-limited",
            GatewayError::Timeout { .. } => "timeout",
            GatewayError::OverBudget { .. } => "over-budget",
            GatewayError::Aborted { .. } => "aborted",
            GatewayError::Unavailable(_) => "unavailable",
            GatewayError::Upstream { .. } => "upstream-unavailable",
            GatewayError::KeyReused(_) => "idempotency-key-reused",
            GatewayError::BadSignature(_) => "bad-signature",
            GatewayError::InProgress(_) => "in-progress",
            GatewayError::Gone(_) => "stream-expired",
            GatewayError::NotRetryable(_) => "not-retryable",
            GatewayError::Internal { .. } => "internal",
        }
    }

    /// What the caller is told: the message, except for an internal failure.
    pub fn public_detail(&self) -> Cow<'static, str> {
        match self {
            GatewayError::Internal { run: Some(_), .. } => Cow::Borrowed(INTERNAL_DETAIL),
            GatewayError::Internal { run: None, .. } => Cow::Borrowed(INTERNAL_DETAIL_NO_RUN),
            GatewayError::Upstream { .. } => Cow::Borrowed(UPSTREAM_DETAIL),
            other => Cow::Owned(other.to_string()),
        }
    }

    /// The run this error belongs to, if any.
    pub fn run(&self) -> Option<&RunRef> {
        match self {
            GatewayError::Denied { run, .. } | GatewayError::Internal { run, .. } => run.as_ref(),
            GatewayError::InvalidArgs { run, .. }
            | GatewayError::Timeout { run, .. }
            | GatewayError::OverBudget { run, .. }
            | GatewayError::Upstream { run, .. }
            | GatewayError::Aborted { run, .. } => Some(run),
            _ => None,
        }
    }
}

/// A skill the policy refused the caller: unknown skills as not found (with the suggestions),
/// skills outside the caller's scope as denied.
impl From<Refusal> for GatewayError {
    fn from(refusal: Refusal) -> GatewayError {
        match refusal {
            Refusal::Unknown { skill, suggestions } => GatewayError::NotFound(Missing::Skill {
                name: skill,
                suggestions: Some(suggestions),
            }),
            Refusal::OutOfScope { skill } => GatewayError::Denied {
                message: format!("this API key may not invoke `{skill}`"),
                run: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const SECRET: &str = "connection to db-internal-7.corp:5432 refused (password=hunter2)";

    #[test]
    fn every_kind_becomes_the_problem_of_its_class() {
        for kind in ErrorKind::ALL {
            let err = SkillError::new(kind, SECRET).with_tool("hello");
            let answer = GatewayError::from_run(&err, "hello", "r1");
            // What a run is recorded with is what its caller is answered with.
            let slug = Failure::of(&err, "hello").slug();
            assert_eq!(answer.slug(), slug, "{kind:?}");
            assert_eq!(
                answer.run(),
                Some(&RunRef {
                    skill: "hello".into(),
                    request_id: "r1".into()
                }),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn internal_causes_never_reach_the_caller() {
        for kind in ErrorKind::ALL {
            let err = SkillError::new(kind, SECRET).with_tool("hello");
            let answer = GatewayError::from_run(&err, "hello", "r1");
            if answer.slug() == "internal" {
                assert_eq!(answer.public_detail(), INTERNAL_DETAIL, "{kind:?}");
                // The cause stays with the error, for the log.
                assert_eq!(answer.to_string(), SECRET);
            } else {
                assert_eq!(answer.public_detail(), SECRET, "{kind:?}");
            }
        }
    }

    #[test]
    fn invalid_args_carry_the_field_errors() {
        let err = SkillError::new(ErrorKind::InvalidArgs, "`name` is missing")
            .with_data(json!({ "errors": [{ "path": "/name", "message": "required" }] }));
        let GatewayError::InvalidArgs {
            message, errors, ..
        } = GatewayError::from_run(&err, "hello", "r1")
        else {
            panic!("invalid args");
        };
        assert_eq!(message, "`name` is missing");
        assert_eq!(errors[0]["path"], "/name");
    }

    #[test]
    fn refusals_become_not_found_with_suggestions_or_denied() {
        let unknown = GatewayError::from(Refusal::Unknown {
            skill: "helo".into(),
            suggestions: vec!["hello".into()],
        });
        assert_eq!(unknown.slug(), "not-found");
        assert_eq!(
            unknown.to_string(),
            "no skill is named `helo`; did you mean `hello`?"
        );
        let scoped = GatewayError::from(Refusal::OutOfScope {
            skill: "admin".into(),
        });
        assert_eq!(scoped.slug(), "denied");
        assert_eq!(scoped.to_string(), "this API key may not invoke `admin`");
    }
}
