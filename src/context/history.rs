//! `locals.history`: an append-only stack of `{ tool, args, timestamp }` frames.
//!
//! A context's frames are its ancestors' frames, then its own, then any it pushed. Each context
//! already holds its parent, its tool, its args and its start time, so the stack is read off the
//! parent chain when someone asks for it, and creating a context allocates nothing for history.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::context::{Context, State};

/// A frame a middleware pushed after the context was created.
#[derive(Clone)]
pub struct Frame {
    pub tool: Arc<str>,
    pub args: Arc<Value>,
    pub timestamp: u64,
}

impl Frame {
    fn to_json(&self) -> Value {
        json!({ "tool": &*self.tool, "args": &*self.args, "timestamp": self.timestamp })
    }
}

/// The frames of `ctx`, oldest first; `state` is `ctx`'s own (already locked) state.
pub(crate) fn to_json(ctx: &Context, state: &State) -> Value {
    let mut chain = Vec::new();
    let mut cur = ctx.parent();
    while let Some(c) = cur {
        chain.push(c);
        cur = c.parent();
    }
    let mut frames = Vec::new();
    for ancestor in chain.iter().rev() {
        frames.push(own_frame(ancestor));
        let pushed = ancestor.0.state.lock().locals.pushed.clone();
        frames.extend(pushed.iter().map(Frame::to_json));
    }
    frames.push(own_frame(ctx));
    frames.extend(state.locals.pushed.iter().map(Frame::to_json));
    Value::Array(frames)
}

fn own_frame(ctx: &Context) -> Value {
    json!({
        "tool": ctx.tool_name(),
        "args": &*ctx.0.args,
        "timestamp": ctx.0.started,
    })
}
