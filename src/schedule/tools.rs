//! `schedule-create`, `schedule-delete` and `schedule-list`: schedules kept in the event store,
//! fired by `skillgate serve` (once across replicas) and kept across restarts.

use serde_json::{Value, json};

use crate::context::Context;
use crate::context::id::{iso, now_ms};
use crate::error::{ErrorKind, Result, SkillError};
use crate::events::{EventStore, KernelBus};
use crate::kernel::authority::{Authority, Keys, Principal, ToolClass, check_stored};
use crate::schedule::health::Held;
use crate::schedule::spec::Spec;
use crate::skills::native::native;
use crate::skills::tool::Tool;

/// Schedules administer the server: control-plane tools (see `kernel::authority`).
pub fn tools() -> Vec<Tool> {
    [create(), delete(), list()]
        .into_iter()
        .map(|t| t.class(ToolClass::ControlPlane))
        .collect()
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

/// `name` of a schedule: what skill names may be, plus `#` and digits for declared lists (the
/// project's alone).
fn check_name(name: &str, principal: &Principal) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name.bytes().all(|b| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || b == b'-'
                || (b == b'#' && principal.is_project())
        });
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
      ref: { type: string, pattern: "^[a-z0-9][a-z0-9-]*$", description: The skill to run. }
      cron: { type: string }
      every: { description: "An interval: milliseconds or a string such as 10s." }
      tz: { type: string }
      args: { type: object }
      times: { type: integer, minimum: 1 }
      missed: { enum: [once, skip] }
    required: [name, ref]
"#,
        |ctx, args| async move {
            // Who asked (the kernel let only the project or an admin key run this) and for whom:
            // the schedule is the principal's, and runs later as its call.
            let principal = ctx.authority().principal.clone();
            let name = args["name"].as_str().unwrap_or_default().to_string();
            check_name(&name, &principal)?;
            let reference = args["ref"].as_str().unwrap_or_default();
            if !crate::skills::frontmatter::is_tool_name(reference) {
                return Err(bad(format!(
                    "schedule-create `ref` must be a skill name ([a-z0-9-]), got `{reference}`"
                )));
            }
            let runs_as = Authority::caller(principal.clone());
            runs_as.reach(&ctx.index(), reference)?;
            if let Some(stored) = args.get("args") {
                check_stored(stored)?;
            }
            let now = now_ms() as i64;
            let mut spec = Spec::parse(&args, reference, now)
                .map_err(|e| bad(format!("schedule `{name}`: {e}")))?;
            spec.principal = Some(principal.to_json());
            let store = store(&ctx);
            if let Some(existing) = find(&store, &name).await?
                && !principal.is_project()
                && existing.principal().ok().as_ref() != Some(&principal)
            {
                return Err(taken(&name));
            }
            let next = spec.next_after(now);
            let written = store
                .put_schedule(&name, &spec.to_stored(), next)
                .await
                .map_err(store_error)?;
            let out =
                json!({ "name": name, "changed": written, "next": next.map_or(Value::Null, iso) });
            Ok(Some(with_spec(out, &spec)))
        },
    )
}

/// The schedule named `name`, if any.
async fn find(store: &std::sync::Arc<dyn EventStore>, name: &str) -> Result<Option<Spec>> {
    let stored = store.schedules().await.map_err(store_error)?;
    Ok(stored
        .into_iter()
        .find(|s| s.name == name)
        .and_then(|s| Spec::from_stored(&s.spec).ok()))
}

/// Another principal's schedule: refused as not found, so names beyond reach are not told.
fn taken(name: &str) -> SkillError {
    SkillError::new(
        ErrorKind::NotFound,
        format!("no schedule named `{name}` of yours; pick another name"),
    )
}

/// Whether `principal` may see and remove `spec`: its own, or any with `admin`.
fn owns(principal: &Principal, spec: &Spec) -> bool {
    principal.admin() || spec.principal().ok().as_ref() == Some(principal)
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
      name: { type: string, description: "The schedule's name, as schedule-list shows it." }
    required: [name]
"#,
        |ctx, args| async move {
            let name = args["name"].as_str().unwrap_or_default();
            let principal = &ctx.authority().principal;
            let store = store(&ctx);
            match find(&store, name).await? {
                Some(spec) if owns(principal, &spec) => {}
                // Missing and not yours look alike.
                _ => return Ok(Some(json!({ "deleted": false }))),
            }
            let deleted = store.delete_schedule(name).await.map_err(store_error)?;
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
            let principal = ctx.authority().principal.clone();
            let keys = ctx.kernel().extension::<Keys>().cloned();
            let mut list = Vec::new();
            for s in &stored {
                let mut out = json!({
                    "name": s.name,
                    "next": s.next_ms.map_or(Value::Null, iso),
                    "nextMs": s.next_ms,
                    "runs": s.runs,
                });
                match Spec::from_stored(&s.spec) {
                    Ok(spec) if owns(&principal, &spec) => {
                        if let (Some(keys), Ok(owner)) = (&keys, spec.principal())
                            && let Err(why) = keys.current(&owner)
                        {
                            out["paused"] = Value::from(why);
                        }
                        if !ctx.index().contains(&spec.reference) {
                            let held = Held::SkillMissing(spec.reference.clone());
                            out["paused"] = Value::from(held.reason());
                        }
                        out = with_spec(out, &spec);
                    }
                    Ok(_) => continue,
                    // Unreadable ones are the operators' to see.
                    Err(e) if principal.admin() => out["error"] = Value::from(e),
                    Err(_) => continue,
                }
                list.push(out);
            }
            Ok(Some(Value::Array(list)))
        },
    )
}
