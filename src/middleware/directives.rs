//! `directives`: finds `:name[label]{attrs}` directives in the served prompt whose name is a
//! tool, and injects one entry per directive, in document order, right after itself.
//!
//! Each directive's text is replaced by a placeholder in `locals.prompt.expanded`; the
//! directive's tool replaces its placeholder with its output when it runs. Directive names that
//! are not tools stay as literal text. Each entry carries the directive's text and byte
//! offset, from which a failing directive tells where it is (`file:line:column`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::cascade::Entry;
use crate::error::SkillError;
use crate::skills::directive_syntax::{find_directives, splice};
use crate::skills::native::{pass, pipeline_middleware};
use crate::skills::tool::Tool;

/// Directives expanded in one body at most: each runs as one more layer of the pipeline.
pub const MAX_DIRECTIVES: usize = 2000;

/// Marks the placeholder of directive `i` in the expanded prompt (Unicode private use area).
pub fn placeholder(i: usize) -> String {
    format!("\u{E000}{i}\u{E001}")
}

/// The tool's prompt as its file has it.
fn raw_prompt(tool: &Tool) -> Option<&str> {
    tool.prompt
        .as_ref()
        .and_then(|p| p.get("raw"))
        .and_then(Value::as_str)
}

/// Where a directive is, for a failure's message: `file:line:column` from its byte `offset`
/// in the file's prompt; only the file when earlier middleware rewrote the prompt before
/// `directives` scanned it (`offset` is then `None`: positions would lie).
pub(crate) fn location(tool: &Tool, offset: Option<usize>) -> String {
    let file = tool.location();
    match (offset, raw_prompt(tool)) {
        (Some(offset), Some(raw)) if offset <= raw.len() => {
            let before = &raw[..offset];
            let line = tool.prompt_line + before.matches('\n').count();
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            format!("{file}:{line}:{column}")
        }
        _ => format!("{file} (in the prompt as rewritten before `directives`)"),
    }
}

pub fn tool() -> Tool {
    pipeline_middleware(
        "directives",
        "Expands directives in the served skill's prompt by injecting their tools.",
        |target, _args| async move {
            let Some(text) = target.prompt_expanded() else {
                return pass(&target).await;
            };
            if !text.contains(':') {
                return pass(&target).await;
            }
            let index = target.index();
            let found = find_directives(&text, &|name| index.contains(name));
            if found.is_empty() {
                return pass(&target).await;
            }
            if found.len() > MAX_DIRECTIVES {
                return Err(target.fail(SkillError::failed(format!(
                    "{}: the prompt has {} directives; at most {MAX_DIRECTIVES} are expanded in one body",
                    target.tool().location(),
                    found.len()
                ))));
            }
            // Positions are only told when they are the file's (computed on failure only).
            let from_file = raw_prompt(&target.tool()) == Some(text.as_str());
            let expanded = splice(&text, &found, &mut |i, _| placeholder(i));
            target.set("locals.prompt.expanded", Value::String(expanded))?;
            let entries = found
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let args = json!({
                        "label": d.label,
                        "attrs": d.attrs.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
                        "index": i,
                        "leaf": d.leaf,
                        "offset": from_file.then_some(d.span.start),
                        "source": &text[d.span.clone()],
                    });
                    Entry {
                        directive: true,
                        ..Entry::tool(d.name.as_str(), Arc::new(args))
                    }
                })
                .collect();
            target.inject(entries)?;
            pass(&target).await
        },
    )
}
