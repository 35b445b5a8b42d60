//! `debug`: a hook on `$invoke` and `$next` that logs pipeline-enter/exit, next-enter/exit and
//! breakpoint-hit events (tag `debug`, level `debug`). `debug: { break: [names] }` marks
//! breakpoints on chain entries.

use serde_json::{Value, json};

use crate::context::Context;
use crate::skills::native::hook_middleware;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    hook_middleware(
        "debug",
        "Pipeline debugging hook: logs pipeline and chain entry events. Activate with `debug: true`.",
        |target, hook| async move {
            let entry = hook
                .get("entry")
                .and_then(Value::as_str)
                .map(str::to_string);
            let config = hook.get("config").cloned().unwrap_or(Value::Null);
            let (enter, exit) = match &entry {
                Some(_) => ("next-enter", "next-exit"),
                None => ("pipeline-enter", "pipeline-exit"),
            };
            emit(&target, enter, &entry, json!({}));
            if let Some(name) = &entry {
                let breaks = config.get("break").and_then(Value::as_array);
                if breaks.is_some_and(|b| b.iter().any(|n| n.as_str() == Some(name))) {
                    emit(&target, "breakpoint-hit", &entry, json!({}));
                }
            }
            let out = target.next().await;
            match &out {
                Ok(result) => emit(
                    &target,
                    exit,
                    &entry,
                    json!({ "result": result.as_deref() }),
                ),
                Err(err) => emit(&target, exit, &entry, json!({ "error": err.to_json() })),
            }
            out.map(|_| None)
        },
    )
}

fn emit(target: &Context, kind: &str, entry: &Option<String>, extra: Value) {
    let mut event = json!({
        "type": kind,
        "tag": "debug",
        "level": "debug",
        "text": match entry {
            Some(e) => format!("{kind} {} / {e}", target.tool_name()),
            None => format!("{kind} {}", target.tool_name()),
        },
        "skill": target.tool_name(),
        "entry": entry,
        "servedContextId": target.id(),
    });
    if let (Value::Object(map), Value::Object(more)) = (&mut event, extra) {
        map.extend(more);
    }
    let _ = target.log(event);
}
