//! The one error type that unwinds through the onion: what went wrong, where, and how a user fixes it.
//!
//! A `SkillError` is cheap to clone (the payload sits behind an `Arc`) because the same error is
//! kept in `locals.error` of the context that failed and propagated to every caller.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};

/// Result of every kernel operation.
pub type Result<T, E = SkillError> = std::result::Result<T, E>;

/// What kind of failure this is; the CLI and the gateways map it to exit codes and statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A skill or middleware raised the error itself (`fail`, a thrown exception).
    Failed,
    /// No tool answers to the reference.
    NotFound,
    /// Invocation args fail the params schema.
    InvalidArgs,
    /// A result fails the returns schema.
    InvalidReturns,
    /// Bad metadata, a cycle in `$order` or `$inherit`, a malformed skill file.
    Config,
    /// A policy (`allowed-tools`, untrusted refs) refused the call.
    Denied,
    /// The context was aborted.
    Aborted,
    /// A write the spec forbids (immutable, set-once or append-only property).
    Immutable,
    /// A markdown skill asked for a model and no agent provider can run it.
    NoAgentProvider,
    /// A bug or an environment failure (I/O); the detail belongs in the log.
    Internal,
}

impl ErrorKind {
    /// Every kind, for code that must decide each one (exit codes, how a transport answers).
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::Failed,
        ErrorKind::NotFound,
        ErrorKind::InvalidArgs,
        ErrorKind::InvalidReturns,
        ErrorKind::Config,
        ErrorKind::Denied,
        ErrorKind::Aborted,
        ErrorKind::Immutable,
        ErrorKind::NoAgentProvider,
        ErrorKind::Internal,
    ];

    /// Stable machine-readable code used in JSON and problem documents.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Failed => "failed",
            ErrorKind::NotFound => "not-found",
            ErrorKind::InvalidArgs => "invalid-args",
            ErrorKind::InvalidReturns => "invalid-returns",
            ErrorKind::Config => "config",
            ErrorKind::Denied => "denied",
            ErrorKind::Aborted => "aborted",
            ErrorKind::Immutable => "immutable",
            ErrorKind::NoAgentProvider => "no-agent-provider",
            ErrorKind::Internal => "internal",
        }
    }

    fn from_code(code: &str) -> ErrorKind {
        match code {
            "not-found" => ErrorKind::NotFound,
            "invalid-args" => ErrorKind::InvalidArgs,
            "invalid-returns" => ErrorKind::InvalidReturns,
            "config" => ErrorKind::Config,
            "denied" => ErrorKind::Denied,
            "aborted" => ErrorKind::Aborted,
            "immutable" => ErrorKind::Immutable,
            "no-agent-provider" => ErrorKind::NoAgentProvider,
            "internal" => ErrorKind::Internal,
            _ => ErrorKind::Failed,
        }
    }
}

#[derive(Debug, Clone)]
struct Inner {
    kind: ErrorKind,
    message: String,
    /// Structured detail a program can act on (failing fields, the cycle, suggestions).
    data: Option<Value>,
    /// The tool whose pipeline raised it, when known.
    tool: Option<String>,
    /// A stack trace from a scripted skill, if one crossed the boundary.
    stack: Option<String>,
}

/// An error raised inside a pipeline, kept in `locals.error` and returned through `next()`.
#[derive(Clone)]
pub struct SkillError(Arc<Inner>);

impl SkillError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        SkillError(Arc::new(Inner {
            kind,
            message: message.into(),
            data: None,
            tool: None,
            stack: None,
        }))
    }

    /// A failure raised by a skill (`ctx.manager.fail("...")`).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, message)
    }

    /// The server cannot take this now (a full queue, too many runs); the caller may try again
    /// in a moment. Marked `{"limit": "busy"}`, which the gateway answers as 503 with
    /// `Retry-After`.
    pub fn busy(message: impl Into<String>) -> Self {
        Self::failed(message).with_data(serde_json::json!({ "limit": "busy", "retryAfter": 1 }))
    }

    /// A service the run depends on (an MCP server, a model vendor) could not be reached or did
    /// not answer in time. Marked `{"upstream": true}` (beside what else the data says), which
    /// the gateway answers as 502 without the message (it names the service: the operator's
    /// business, so it goes to the log).
    pub fn upstream(message: impl Into<String>) -> Self {
        Self::failed(message).with_data(serde_json::json!({ "upstream": true }))
    }

    /// True for an error marked as [`SkillError::upstream`] makes it.
    pub fn is_upstream(&self) -> bool {
        self.data()
            .and_then(|d| d.get("upstream"))
            .is_some_and(|u| u == true)
    }

    /// The same error with this message instead (data, tool and stack kept).
    pub fn reworded(self, message: impl Into<String>) -> Self {
        let message = message.into();
        self.edit(|inner| inner.message = message)
    }

    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    pub fn with_data(self, data: Value) -> Self {
        self.edit(|inner| inner.data = Some(data))
    }

    pub fn with_tool(self, tool: impl Into<String>) -> Self {
        self.edit(|inner| inner.tool = Some(tool.into()))
    }

    pub fn with_stack(self, stack: impl Into<String>) -> Self {
        self.edit(|inner| inner.stack = Some(stack.into()))
    }

    /// The same error with `prefix` before its message (where it happened, say).
    pub fn prefixed(self, prefix: &str) -> Self {
        self.edit(|inner| inner.message = format!("{prefix}{}", inner.message))
    }

    fn edit(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut arc = self.0;
        // Errors are edited right after construction, so this almost never copies.
        let inner = Arc::make_mut(&mut arc);
        f(inner);
        SkillError(arc)
    }

    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    pub fn message(&self) -> &str {
        &self.0.message
    }

    pub fn data(&self) -> Option<&Value> {
        self.0.data.as_ref()
    }

    pub fn tool(&self) -> Option<&str> {
        self.0.tool.as_deref()
    }

    pub fn stack(&self) -> Option<&str> {
        self.0.stack.as_deref()
    }

    /// The JSON form stored in `locals.error` and shown to programs.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("name".into(), json!("SkillError"));
        map.insert("code".into(), json!(self.0.kind.code()));
        map.insert("message".into(), json!(self.0.message));
        if let Some(tool) = &self.0.tool {
            map.insert("tool".into(), json!(tool));
        }
        if let Some(data) = &self.0.data {
            map.insert("data".into(), data.clone());
        }
        if let Some(stack) = &self.0.stack {
            map.insert("stack".into(), json!(stack));
        }
        Value::Object(map)
    }

    /// Rebuilds an error from a JSON value a skill gave to `fail` (a string or an error object).
    pub fn from_json(value: &Value) -> Self {
        match value {
            Value::String(s) => SkillError::failed(s.clone()),
            Value::Object(map) => {
                let message = map
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("skill failed")
                    .to_string();
                let kind = map
                    .get("code")
                    .and_then(Value::as_str)
                    .map_or(ErrorKind::Failed, ErrorKind::from_code);
                let mut err = SkillError::new(kind, message);
                if let Some(data) = map.get("data") {
                    err = err.with_data(data.clone());
                }
                if let Some(stack) = map.get("stack").and_then(Value::as_str) {
                    err = err.with_stack(stack);
                }
                err
            }
            other => SkillError::failed(other.to_string()),
        }
    }
}

impl fmt::Display for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl fmt::Debug for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillError")
            .field("kind", &self.0.kind)
            .field("message", &self.0.message)
            .field("tool", &self.0.tool)
            .field("data", &self.0.data)
            .finish()
    }
}

impl std::error::Error for SkillError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_kind_once() {
        // The match has no wildcard: a new kind fails to compile here until it is in `ALL`.
        let position = |kind: ErrorKind| match kind {
            ErrorKind::Failed => 0,
            ErrorKind::NotFound => 1,
            ErrorKind::InvalidArgs => 2,
            ErrorKind::InvalidReturns => 3,
            ErrorKind::Config => 4,
            ErrorKind::Denied => 5,
            ErrorKind::Aborted => 6,
            ErrorKind::Immutable => 7,
            ErrorKind::NoAgentProvider => 8,
            ErrorKind::Internal => 9,
        };
        for (i, kind) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(position(*kind), i, "{kind:?}");
        }
    }

    #[test]
    fn error_json_round_trips_kind_message_and_data() {
        let err = SkillError::new(ErrorKind::InvalidArgs, "bad")
            .with_data(json!({"fields": ["/name"]}))
            .with_tool("hello");
        let back = SkillError::from_json(&err.to_json());
        assert_eq!(back.kind(), ErrorKind::InvalidArgs);
        assert_eq!(back.message(), "bad");
        assert_eq!(back.data(), Some(&json!({"fields": ["/name"]})));
    }
}
