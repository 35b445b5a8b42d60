//! The vendor-neutral shape of a model call: messages, tool definitions and calls, the answer,
//! token usage, and what can go wrong.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering the assistant's call `tool_call_id`.
    Tool,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// The calls an assistant message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Message {
        Message::plain(Role::System, text)
    }

    pub fn user(text: impl Into<String>) -> Message {
        Message::plain(Role::User, text)
    }

    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message {
            tool_calls,
            ..Message::plain(Role::Assistant, text)
        }
    }

    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Message::plain(Role::Tool, text)
        }
    }

    fn plain(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// JSON Schema of its input.
    pub schema: Value,
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The input, parsed (an object for well-behaved models).
    pub input: Value,
}

/// One model call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDef>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    #[default]
    EndTurn,
    ToolUse,
    MaxTokens,
    /// The vendor's content filter.
    Refused,
}

/// The model's answer to one call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop: StopReason,
    /// The model that answered, as the vendor named it.
    pub model: String,
    /// Failed attempts before this answer (429, 5xx), counted by [`super::retry::call`].
    pub retries: u32,
}

/// A streamed piece of the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Text(String),
    Reasoning(String),
}

/// What went wrong with a call, in words a skill author can act on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    #[error("{provider}: the API key was refused (401): {message}")]
    Unauthorized {
        provider: &'static str,
        message: String,
    },
    #[error("{provider}: the conversation is longer than the model's context window: {message}")]
    ContextLength {
        provider: &'static str,
        message: String,
    },
    #[error("{provider}: rate limited (429): {message}")]
    RateLimited {
        provider: &'static str,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("{provider}: the server failed ({status}): {message}")]
    Server {
        provider: &'static str,
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("{provider}: the request was refused ({status}): {message}")]
    Request {
        provider: &'static str,
        status: u16,
        message: String,
    },
    #[error("{provider}: no answer within {after:?}")]
    Timeout {
        provider: &'static str,
        after: Duration,
    },
    #[error("{provider}: the answer could not be read: {message}")]
    Malformed {
        provider: &'static str,
        message: String,
    },
    #[error("{provider}: {message}")]
    Network {
        provider: &'static str,
        message: String,
    },
}

impl ProviderError {
    /// Whether trying again may help, and after how long the server asked for.
    pub fn retry(&self) -> Option<Option<Duration>> {
        match self {
            ProviderError::RateLimited { retry_after, .. }
            | ProviderError::Server { retry_after, .. } => Some(*retry_after),
            ProviderError::Network { .. } | ProviderError::Timeout { .. } => Some(None),
            _ => None,
        }
    }
}

/// Where a call's text goes as it streams in.
pub type OnDelta<'a> = &'a mut (dyn FnMut(Delta) + Send);

/// A call's whole answer, or why there is none.
pub type Answered = Result<ModelResponse, ProviderError>;
