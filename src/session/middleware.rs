//! The `session` middleware: before the chain, loads the session's newest entries into
//! `locals.session = { key, history }`; after it, appends an entry with what `capture` names
//! (`args`, `result`, the agent trace by `$agent`, and the error when the run failed), keeping
//! the newest `maxEntries`. History is kept per skill and key; without a key (no `key` setting
//! and no gateway conversation) the skill runs with an empty history and nothing is kept.

use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::context::id::{iso, now_ms};
use crate::error::{Result, SkillError};
use crate::events::KernelBus;
use crate::middleware::{idle_without, native, pass, served_at};
use crate::session::settings::{Capture, Settings};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: session
description: Keeps the served skill's per-conversation history, durable in the event store.
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, meta-metadata]
"#,
        |ctx, args| async move {
            let target = ctx.ctx_target()?;
            if args.is_null() {
                return pass(&target).await;
            }
            let settings = Settings::parse(&args).map_err(|e| {
                target.fail(e.prefixed(&served_at(&target)))
            })?;
            let Some(key) = key(&target, &settings)? else {
                // No conversation: the skill runs with an empty history and nothing is kept.
                target.set("locals.session", json!({ "key": null, "history": [] }))?;
                return pass(&target).await;
            };
            let stored_key = format!("{}/{key}", target.tool_name());
            let store = target.kernel().bus().store().clone();
            let entries = store
                .session_entries(&stored_key, settings.max_entries)
                .await
                .map_err(|e| target.fail(SkillError::internal(format!("the session store failed: {e}"))))?;
            let history: Vec<Value> = entries
                .iter()
                .filter_map(|e| match serde_json::from_str(&e.entry) {
                    Ok(v) => Some(v),
                    Err(err) => {
                        tracing::warn!(session = %stored_key, "a session entry is not JSON, skipped: {err}");
                        None
                    }
                })
                .collect();
            target.set("locals.session", json!({ "key": key, "history": history }))?;
            let outcome = target.next().await;
            let at_ms = now_ms() as i64;
            let entry = capture(&target, &settings, at_ms, outcome.as_ref().err());
            if let Err(e) = store
                .session_append(&stored_key, at_ms, &entry.to_string(), settings.max_entries)
                .await
            {
                // The run is done; losing its answer because the history could not be written
                // would be worse than a gap in the history.
                tracing::warn!(session = %stored_key, "could not write the session entry: {e}");
            }
            outcome?;
            Ok(None)
        },
    )
    .idle_when(|metadata, _| idle_without("session", metadata))
}

/// The session key: the setting (interpolated by the cascade), else the gateway's
/// conversation (`nonlocals.gateway.sessionId`).
fn key(target: &Context, settings: &Settings) -> Result<Option<String>> {
    if let Some(key) = &settings.key {
        return Ok(Some(key.clone()));
    }
    Ok(target
        .get("nonlocals.gateway.sessionId")?
        .and_then(|v| v.as_str().map(str::to_string))
        .filter(|s| !s.is_empty()))
}

/// The entry for this run: when, and what `capture` names.
fn capture(target: &Context, settings: &Settings, at_ms: i64, error: Option<&SkillError>) -> Value {
    let mut entry = Map::new();
    entry.insert("at".into(), iso(at_ms));
    for what in &settings.capture {
        let (field, value) = match what {
            Capture::Args => ("args", Some((*target.args()).clone())),
            Capture::Result => ("result", target.get("locals.result").ok().flatten()),
            Capture::Agent => ("agent", target.get("locals.agent.trace").ok().flatten()),
        };
        if let Some(value) = value.filter(|v| !v.is_null()) {
            entry.insert(field.into(), value);
        }
    }
    if let Some(error) = error {
        entry.insert(
            "error".into(),
            json!({ "code": error.kind().code(), "message": error.message() }),
        );
    }
    Value::Object(entry)
}
