//! `locals.history`: an append-only stack of `{ tool, args, timestamp }` frames.
//!
//! A child starts from its parent's frames plus its own, shared rather than copied: the stack is
//! a persistent list, so pushing a frame costs one allocation whatever the depth.

use std::sync::Arc;

use serde_json::{Value, json};

#[derive(Clone, Default)]
pub struct History(Option<Arc<Frame>>);

struct Frame {
    tool: Arc<str>,
    args: Arc<Value>,
    timestamp: u64,
    previous: History,
}

impl History {
    /// This history with one more frame on top.
    pub fn push(&self, tool: Arc<str>, args: Arc<Value>, timestamp: u64) -> History {
        History(Some(Arc::new(Frame {
            tool,
            args,
            timestamp,
            previous: self.clone(),
        })))
    }

    pub fn len(&self) -> usize {
        let mut n = 0;
        let mut cur = &self.0;
        while let Some(frame) = cur {
            n += 1;
            cur = &frame.previous.0;
        }
        n
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Frames oldest first, as JSON.
    pub fn to_json(&self) -> Value {
        let mut frames = Vec::new();
        let mut cur = &self.0;
        while let Some(frame) = cur {
            frames.push(json!({
                "tool": &*frame.tool,
                "args": &*frame.args,
                "timestamp": frame.timestamp,
            }));
            cur = &frame.previous.0;
        }
        frames.reverse();
        Value::Array(frames)
    }
}
