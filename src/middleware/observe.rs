//! `observe`: a hook on `$invoke` that reports each invocation's enter, exit and error.
//!
//! `observe: { ref: skill }` invokes the skill with `{ phase, tool, args, result | error,
//! contextId }`; `observe: { topic: t }` emits the same as an event on topic `t` through
//! `event-emit` when the event bus is installed, and logs it (tag `observe`) otherwise.

use serde_json::{Value, json};

use crate::context::Context;
use crate::error::Result;
use crate::kernel::InvokeOptions;
use crate::skills::native::native;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: observe
description: "Invocation observer hook: reports enter/exit/error to a skill or topic. `observe: { ref, topic }`."
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, hook]
  $hook: { $self: $invoke }
"#,
        |ctx, _args| async move {
            let target = ctx.ctx_target()?;
            let config = ctx.get("locals.hook.config")?.unwrap_or(Value::Null);
            let base = json!({
                "tool": target.tool_name(),
                "args": &*target.args(),
                "contextId": target.id(),
            });
            report(&ctx, &config, with(&base, json!({ "phase": "enter" }))).await?;
            let out = target.next().await;
            let done = match &out {
                Ok(result) => json!({ "phase": "exit", "result": result.as_deref() }),
                Err(err) => json!({ "phase": "error", "error": err.to_json() }),
            };
            report(&ctx, &config, with(&base, done)).await?;
            out.map(|_| None)
        },
    )
}

fn with(base: &Value, more: Value) -> Value {
    let mut out = base.clone();
    if let (Value::Object(map), Value::Object(more)) = (&mut out, more) {
        map.extend(more);
    }
    out
}

async fn report(ctx: &Context, config: &Value, event: Value) -> Result<()> {
    if let Some(reference) = config.get("ref").and_then(Value::as_str) {
        ctx.invoke(reference, event.clone(), InvokeOptions::default())
            .await?;
    }
    if let Some(topic) = config.get("topic").and_then(Value::as_str) {
        if ctx.index().contains("event-emit") {
            let phase = event.get("phase").cloned().unwrap_or(Value::Null);
            let args = json!({ "topic": topic, "type": phase, "data": event });
            ctx.invoke("event-emit", args, InvokeOptions::default())
                .await?;
        } else {
            let mut logged = event;
            if let Value::Object(map) = &mut logged {
                map.insert("type".into(), json!("observe"));
                map.insert("tag".into(), json!("observe"));
                map.insert("level".into(), json!("info"));
                map.insert("topic".into(), json!(topic));
            }
            let _ = ctx.log(logged);
        }
    }
    Ok(())
}
