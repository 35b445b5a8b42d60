//! `schedule-create`, `schedule-delete` and `schedule-list`: schedules kept in the event store,
//! fired by `skillgate serve` (once across replicas) and kept across restarts.

use serde_json::{Value, json};

use crate::context::Context;
use crate::context::id::{iso, now_ms};
use crate::error::{ErrorKind, Result, SkillError};
use crate::events::{EventStore, KernelBus};
use crate::middleware::native;
use crate::schedule::spec::Spec;
use crate::skills::tool::Tool;

pub fn tools() -> Vec<Tool> {
    vec![create(), delete(), list()]
}

fn bad(message: impl Into<String>) -> SkillError {
    SkillError::new(ErrorKind::InvalidArgs, message)
}

fn store(ctx: &Context) -> std::sync::Arc<dyn EventStore> {
    ctx.kernel().bus().store().clone()
}

fn store_error(e: crate::events::StoreError) -> SkillError {
    SkillError::internal(format!("the schedule store failed: {e}"))
}

/// `name` of a schedule: what skill names may be, plus `#` and digits for declared lists.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'#'));
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "a schedule `name` is lowercase letters, digits and `-`, got `{name}`"
        )))
    }
}

/// `out` with the fields that describe `spec` added.
fn with_spec(mut out: Value, spec: &Spec) -> Value {
    if let (Value::Object(out), Value::Object(more)) = (&mut out, spec.describe()) {
        out.extend(more);
    }
    out
}

fn create() -> Tool {
    native(
        r#"
name: schedule-create
description: "Run a skill on a schedule: `cron` (five fields, or six with seconds; `tz` for its time zone) or `every` (`10s`, `5m`, ms); `times` to stop after so many runs, `missed: once | skip` for firings missed while down. Kept across restarts; fires once across replicas under `skillgate serve`. The same name again replaces it."
metadata:
  tags: [schedule]
  params:
    type: object
    properties:
      name: { type: string }
      ref: { type: string, description: The skill to run. }
      cron: { type: string }
      every: { description: "An interval: milliseconds or a string such as 10s." }
      tz: { type: string }
      args: { type: object }
      times: { type: integer, minimum: 1 }
      missed: { enum: [once, skip] }
    required: [name, ref]
"#,
        |ctx, args| async move {
            // A schedule runs later, outside any policy of the code that made it: code
            // marked untrusted (an agent's) may not leave one behind.
            if ctx.parent().is_some_and(Context::is_untrusted) {
                return Err(SkillError::new(
                    ErrorKind::Denied,
                    "untrusted code may not create schedules",
                ));
            }
            let name = args["name"].as_str().unwrap_or_default().to_string();
            check_name(&name)?;
            let reference = args["ref"].as_str().unwrap_or_default();
            if !crate::skills::frontmatter::is_tool_name(reference) {
                return Err(bad(format!(
                    "schedule-create `ref` must be a skill name ([a-z0-9-]), got `{reference}`"
                )));
            }
            ctx.index().find(reference)?;
            let now = now_ms() as i64;
            let spec = Spec::parse(&args, reference, now)
                .map_err(|e| bad(format!("schedule `{name}`: {e}")))?;
            let next = spec.next_after(now);
            let written = store(&ctx)
                .put_schedule(&name, &spec.to_stored(), next)
                .await
                .map_err(store_error)?;
            let mut out =
                json!({ "name": name, "changed": written, "next": next.map_or(Value::Null, iso) });
            if let (Value::Object(out), Value::Object(more)) = (&mut out, spec.describe()) {
                out.extend(more);
            }
            Ok(Some(out))
        },
    )
}

fn delete() -> Tool {
    native(
        r#"
name: schedule-delete
description: Remove a schedule by name; returns whether it existed.
metadata:
  tags: [schedule]
  params:
    type: object
    properties:
      name: { type: string }
    required: [name]
"#,
        |ctx, args| async move {
            let name = args["name"].as_str().unwrap_or_default();
            let deleted = store(&ctx)
                .delete_schedule(name)
                .await
                .map_err(store_error)?;
            Ok(Some(json!({ "deleted": deleted })))
        },
    )
}

fn list() -> Tool {
    native(
        r#"
name: schedule-list
description: "Every schedule: its skill, when it fires next, how many times it ran, and whether a skill's metadata declares it."
metadata:
  tags: [schedule]
"#,
        |ctx, _args| async move {
            let stored = store(&ctx).schedules().await.map_err(store_error)?;
            let list: Vec<Value> = stored
                .iter()
                .map(|s| {
                    let mut out = json!({
                        "name": s.name,
                        "next": s.next_ms.map_or(Value::Null, iso),
                        "nextMs": s.next_ms,
                        "runs": s.runs,
                    });
                    match Spec::from_stored(&s.spec) {
                        Ok(spec) => out = with_spec(out, &spec),
                        Err(e) => out["error"] = Value::from(e),
                    }
                    out
                })
                .collect();
            Ok(Some(Value::Array(list)))
        },
    )
}
