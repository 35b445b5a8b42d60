//! One model call, vendor-neutral: [`ModelRequest`] in, [`ModelResponse`] out, text streamed as
//! [`Delta`]s on the way. Each vendor's wire protocol is a module ([`openai`], [`anthropic`]); [`retry`] wraps
//! any of them with backoff on 429 and 5xx; [`sse`] reads the event streams they answer with;
//! `wire` is the HTTP side they share (timeouts, error statuses, `Retry-After`).

mod answer;
pub mod anthropic;
pub mod bedrock;
pub mod openai;
pub mod retry;
pub mod select;
pub mod sse;
mod types;
mod wire;

pub use types::{
    Answered, Delta, Message, ModelRequest, ModelResponse, OnDelta, ProviderError, Role,
    StopReason, ToolCall, ToolDef, Usage,
};

/// A model vendor's API.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// `openai`, `anthropic`, `bedrock`: the `provider` of `provider/model-id`.
    fn name(&self) -> &'static str;

    /// One call, streamed: `on_delta` sees the text as it comes; the whole answer at the end.
    /// No retry here (see [`retry::call`]).
    async fn call(&self, request: &ModelRequest, on_delta: OnDelta<'_>) -> Answered;
}
