//! `profile`: a hook on `$invoke` and `$next` that times the pipeline and every chain entry
//! into `locals.profile` of the served context (`{ totalMs, entries: [{ name, ms }] }`) and logs
//! a `profile` event when the pipeline exits.

use std::time::Instant;

use serde_json::{Value, json};

use crate::skills::native::hook_middleware;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    hook_middleware(
        "profile",
        "Timing hook: records pipeline and chain entry durations. Activate with `profile: true`.",
        |target, hook| async move {
            let started = Instant::now();
            let out = target.next().await;
            let entry = hook.get("entry").and_then(Value::as_str);
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            match entry {
                Some(name) => {
                    let mut entries = target
                        .get("locals.profile.entries")?
                        .unwrap_or_else(|| json!([]));
                    if let Value::Array(items) = &mut entries {
                        items.push(json!({ "name": name, "ms": ms }));
                    }
                    target.set("locals.profile.entries", entries)?;
                }
                None => {
                    target.set("locals.profile.totalMs", json!(ms))?;
                    let profile = target.get("locals.profile")?;
                    let _ = target.log(json!({
                        "type": "profile",
                        "tag": "profile",
                        "level": "debug",
                        "text": format!("{} took {ms:.3} ms", target.tool_name()),
                        "profile": profile,
                    }));
                }
            }
            out.map(|_| None)
        },
    )
}
