//! The `session` middleware: before the chain, loads the session's newest entries into
//! `locals.session = { key, history, turn }`; after it, appends an entry with what `capture`
//! names (`args`, `result`, the agent trace by `$agent`, and the error when the run failed) and
//! its `turn` (the conversation turn, 0-based, counted on across the trimmed history), keeping
//! the newest `maxEntries`. History is kept per skill and key; without a key (no `key` setting
//! and no gateway conversation) the skill runs with an empty history and nothing is kept. An
//! entry is kept under [`MAX_ENTRY_BYTES`]: a larger one loses the agent trace first, then its
//! largest values.

use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::context::id::{iso, now_ms};
use crate::error::{Result, SkillError};
use crate::events::KernelBus;
use crate::session::settings::{Capture, Settings};
use crate::skills::native::{idle_without, metadata_middleware, pass, served_at};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "session",
        "Keeps the served skill's per-conversation history, durable in the event store.",
        |target, args| async move {
            if args.is_null() {
                return pass(&target).await;
            }
            let settings = Settings::parse(&args).map_err(|e| {
                target.fail(e.prefixed(&served_at(&target)))
            })?;
            let Some(key) = key(&target, &settings)? else {
                // No conversation: the skill runs with an empty history and nothing is kept.
                target.set("locals.session", json!({ "key": null, "history": [], "turn": 0 }))?;
                return pass(&target).await;
            };
            let stored_key =
                super::stored_key(target.tool_name(), &target.authority().principal, &key);
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
            let turn = next_turn(&history);
            target.set("locals.session", json!({ "key": key, "history": history, "turn": turn }))?;
            let outcome = target.next().await;
            if target.get("locals.session.cleared")? == Some(Value::Bool(true)) {
                // `session-clear` ran in this turn: the history starts after it.
                outcome?;
                return Ok(None);
            }
            let at_ms = now_ms() as i64;
            let entry = capture(&target, &settings, (at_ms, turn), outcome.as_ref().err());
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

/// The most one stored entry may take (its JSON text).
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

/// Keeps `entry` under `limit` bytes of JSON: the agent trace goes first, then `result`,
/// `args` and `error`, the largest first; each dropped value leaves `{ omitted: true, bytes }`
/// in its place.
fn bound(entry: &mut Map<String, Value>, limit: usize) {
    let size = |v: &Value| v.to_string().len();
    let over = |e: &Map<String, Value>| size(&Value::Object(e.clone())) > limit;
    let mut order: Vec<(&str, usize)> = ["result", "args", "error"]
        .iter()
        .map(|f| (*f, entry.get(*f).map_or(0, size)))
        .collect();
    order.sort_by_key(|f| std::cmp::Reverse(f.1));
    for name in std::iter::once("agent").chain(order.into_iter().map(|(f, _)| f)) {
        if !over(entry) {
            return;
        }
        let bytes = entry.get(name).map_or(0, size);
        // A value smaller than its marker stays.
        if bytes > 64 {
            entry.insert(name.into(), json!({ "omitted": true, "bytes": bytes }));
        }
    }
}

/// This run's conversation turn: one after the newest entry's, or (entries kept before turns
/// were numbered) the number of entries.
fn next_turn(history: &[Value]) -> u64 {
    match history
        .last()
        .and_then(|e| e.get("turn"))
        .and_then(Value::as_u64)
    {
        Some(last) => last + 1,
        None => history.len() as u64,
    }
}

/// The entry for this run: when, its turn, and what `capture` names.
fn capture(
    target: &Context,
    settings: &Settings,
    (at_ms, turn): (i64, u64),
    error: Option<&SkillError>,
) -> Value {
    let mut entry = Map::new();
    entry.insert("at".into(), iso(at_ms));
    entry.insert("turn".into(), turn.into());
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
    bound(&mut entry, MAX_ENTRY_BYTES);
    Value::Object(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(agent: usize, result: usize, args: usize) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("at".into(), json!("t"));
        m.insert("args".into(), json!("a".repeat(args)));
        m.insert("result".into(), json!("r".repeat(result)));
        m.insert("agent".into(), json!(["x".repeat(agent)]));
        m
    }

    #[test]
    fn an_entry_under_the_limit_is_kept_whole() {
        let mut e = entry(100, 100, 100);
        let before = e.clone();
        bound(&mut e, 1_000);
        assert_eq!(e, before);
    }

    #[test]
    fn an_oversized_entry_loses_the_agent_trace_first() {
        let mut e = entry(5_000, 100, 100);
        bound(&mut e, 1_000);
        assert_eq!(e["agent"], json!({ "omitted": true, "bytes": 5_004 }));
        assert_eq!(e["result"], json!("r".repeat(100)));
        assert_eq!(e["args"], json!("a".repeat(100)));
    }

    #[test]
    fn then_its_largest_values_until_it_fits() {
        let mut e = entry(5_000, 3_000, 800);
        bound(&mut e, 1_000);
        assert_eq!(e["result"]["omitted"], true);
        assert_eq!(
            e["args"],
            json!("a".repeat(800)),
            "it fits once the result is out"
        );
        let mut e = entry(5_000, 3_000, 2_000);
        bound(&mut e, 1_000);
        assert_eq!(e["result"]["omitted"], true);
        assert_eq!(e["args"]["omitted"], true);
        assert!(Value::Object(e).to_string().len() <= 1_000);
    }
}
