//! On-demand serialization of a context: non-JSON values dropped, `"[Circular]"` for a context
//! already being written, nesting cut at a depth (default 8) with `"[Object]"`/`"[Array]"`.

use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::context::access::{locals_json, run_json};

/// The default nesting limit.
pub const DEFAULT_DEPTH: usize = 8;

impl Context {
    /// The serializable view of this context (depth 8).
    pub fn to_json(&self) -> Value {
        self.to_json_depth(DEFAULT_DEPTH)
    }

    /// The serializable view, cut at `depth` levels of nesting.
    pub fn to_json_depth(&self, depth: usize) -> Value {
        serialize(self, depth, &mut Vec::new())
    }
}

fn serialize(ctx: &Context, depth: usize, visiting: &mut Vec<u64>) -> Value {
    if visiting.contains(&ctx.raw_id()) {
        return json!("[Circular]");
    }
    if depth == 0 {
        return json!("[Object]");
    }
    visiting.push(ctx.raw_id());
    let reference = |other: &Context, visiting: &mut Vec<u64>| {
        if depth < 3 {
            json!("[Object]")
        } else {
            serialize(other, depth - 2, visiting)
        }
    };
    let parent = match ctx.parent() {
        Some(p) => reference(p, visiting),
        None => Value::Null,
    };
    let target = match &ctx.0.target {
        Some(t) => reference(t, visiting),
        None => json!("[Circular]"),
    };
    let (locals, nonlocals, run) = {
        let state = ctx.0.state.lock();
        (
            locals_json(ctx, &state),
            Value::Object((*state.nonlocals).clone()),
            run_json(ctx, &state),
        )
    };
    let globals = Value::Object(
        ctx.own_globals()
            .unwrap_or_else(|| ctx.0.kernel.globals().read().clone()),
    );
    visiting.pop();
    let mut out = Map::new();
    out.insert(
        "envelope".into(),
        json!({
            "id": ctx.id(),
            "parent": parent,
            "target": target,
            "hasOtherTarget": ctx.has_other_target(),
        }),
    );
    out.insert("args".into(), (*ctx.0.args).clone());
    out.insert("locals".into(), locals);
    out.insert("nonlocals".into(), nonlocals);
    out.insert("globals".into(), globals);
    out.insert("run".into(), run);
    let mut value = Value::Object(out);
    // The envelope's references were cut already; cut everything else to the same depth.
    cut(&mut value, depth, true);
    value
}

/// Replaces containers deeper than `depth` with a marker. `top` skips the envelope, whose
/// nested contexts were serialized with their own budget.
fn cut(value: &mut Value, depth: usize, top: bool) {
    match value {
        Value::Object(map) => {
            if depth == 0 {
                *value = json!("[Object]");
                return;
            }
            for (key, item) in map.iter_mut() {
                if top && key == "envelope" {
                    continue;
                }
                cut(item, depth - 1, false);
            }
        }
        Value::Array(items) => {
            if depth == 0 {
                *value = json!("[Array]");
                return;
            }
            for item in items {
                cut(item, depth - 1, false);
            }
        }
        _ => {}
    }
}
