//! A streamed answer being put together, for vendors whose streams open each tool call as a
//! content block and send its input as JSON pieces (Anthropic, Bedrock): the text so far, the
//! calls by block index, usage, why the model stopped, the model's name.

use std::collections::BTreeMap;

use super::wire::{Wire, tool_input};
use super::{Delta, ModelResponse, OnDelta, ProviderError, StopReason, ToolCall, Usage};

#[derive(Default)]
pub(super) struct Answer {
    text: String,
    /// Tool calls by content block index: id, name, JSON so far.
    calls: BTreeMap<u64, (String, String, String)>,
    pub usage: Usage,
    pub stop: StopReason,
    pub model: String,
}

impl Answer {
    /// A piece of the answer's text, passed on as it comes.
    pub fn text(&mut self, piece: &str, on_delta: OnDelta<'_>) {
        self.text.push_str(piece);
        on_delta(Delta::Text(piece.to_string()));
    }

    /// Content block `index` is a call of tool `name`.
    pub fn start_call(&mut self, index: u64, id: &str, name: &str) {
        self.calls
            .insert(index, (id.to_string(), name.to_string(), String::new()));
    }

    /// A piece of the JSON input of the call in block `index`.
    pub fn call_input(
        &mut self,
        wire: &Wire,
        index: u64,
        piece: &str,
    ) -> Result<(), ProviderError> {
        let call = self.calls.get_mut(&index).ok_or_else(|| {
            wire.malformed(format!(
                "tool input for content block {index}, which is not a tool call"
            ))
        })?;
        call.2.push_str(piece);
        Ok(())
    }

    /// The whole answer, each call's input parsed.
    pub fn finish(self, wire: &Wire) -> Result<ModelResponse, ProviderError> {
        let tool_calls = self
            .calls
            .into_values()
            .map(|(id, name, args)| {
                let input = tool_input(wire, &name, &args)?;
                Ok(ToolCall { id, name, input })
            })
            .collect::<Result<Vec<_>, ProviderError>>()?;
        Ok(ModelResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
            stop: self.stop,
            model: self.model,
            retries: 0,
        })
    }
}
