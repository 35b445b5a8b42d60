//! Sessions: the per-key history of a skill's invocations, kept durable in the event store's
//! database by the `session` middleware, so a chat thread, a mail thread, a WebSocket client or
//! a browser continues its conversation across requests and replicas.
//!
//! - `settings`: `metadata.session` (`key`, `capture`, `maxEntries`), checked with clear errors.
//! - `middleware`: the `session` middleware: loads `locals.session`, runs the chain, appends
//!   what `capture` names.
//! - `clear`: the `session-clear` tool (a chat's "/reset").
//! - [`render_history`]: the history as text, which `agent-execute` adds to a model's prompt.

pub mod clear;
pub mod middleware;
pub mod settings;

use serde_json::Value;

/// Where a conversation `key` of `skill` is kept for `principal`: per skill and per principal,
/// so a key built from args (`${args.customer}`) can never reach another principal's history.
/// The project's own (the command line) are kept under the skill alone.
pub fn stored_key(
    skill: &str,
    principal: &crate::kernel::authority::Principal,
    key: &str,
) -> String {
    if principal.is_project() {
        format!("{skill}/{key}")
    } else {
        format!("{skill}/{}/{key}", principal.id())
    }
}

/// The longest text one captured value contributes to a rendered history.
const RENDER_LIMIT: usize = 2_000;

/// The history as a prompt section a model can read, or `None` when it is empty.
pub fn render_history(history: &[Value]) -> Option<String> {
    if history.is_empty() {
        return None;
    }
    let mut out = String::from("## Earlier in this conversation\n");
    for entry in history {
        out.push('\n');
        out.push_str("- ");
        if let Some(at) = entry.get("at").and_then(Value::as_str) {
            out.push_str(&format!("[{at}] "));
        }
        if let Some(args) = entry.get("args") {
            out.push_str(&format!("asked with {}", shown(args)));
        }
        match (entry.get("result"), entry.get("error")) {
            (_, Some(error)) => out.push_str(&format!("; it failed: {}", shown(error))),
            (Some(result), None) => out.push_str(&format!("; you answered: {}", shown(result))),
            (None, None) => {}
        }
    }
    Some(out)
}

/// A value as prompt text: strings as they are, anything else as JSON, cut to a length.
fn shown(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() <= RENDER_LIMIT {
        return text;
    }
    let cut: String = text.chars().take(RENDER_LIMIT).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn history_renders_each_turn_with_its_args_and_answer_or_failure() {
        let text = render_history(&[
            json!({"at": "t1", "args": {"text": "hi"}, "result": "hello"}),
            json!({"at": "t2", "args": "again", "error": {"message": "boom"}}),
        ])
        .unwrap();
        assert_eq!(
            text,
            "## Earlier in this conversation\n\n- [t1] asked with {\"text\":\"hi\"}; you answered: hello\n- [t2] asked with again; it failed: {\"message\":\"boom\"}"
        );
        assert_eq!(render_history(&[]), None);
    }

    #[test]
    fn long_values_are_cut_in_the_rendered_history() {
        let long = "x".repeat(RENDER_LIMIT + 10);
        let text = render_history(&[json!({"result": long})]).unwrap();
        assert!(text.ends_with("..."));
        assert!(text.len() < RENDER_LIMIT + 100);
    }
}
