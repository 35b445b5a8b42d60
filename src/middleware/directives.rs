//! `directives`: finds `:name[label]{attrs}` directives in the served prompt whose name is a
//! tool, and injects one entry per directive, in document order, right after itself.
//!
//! Each directive's text is replaced by a placeholder in `locals.prompt.expanded`; the
//! directive's tool replaces its placeholder with its output when it runs. Directive names that
//! are not tools stay as literal text.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::cascade::Entry;
use crate::middleware::{native, pass};
use crate::skills::directive_syntax::{find_directives, splice};
use crate::skills::tool::Tool;

/// Marks the placeholder of directive `i` in the expanded prompt (Unicode private use area).
pub fn placeholder(i: usize) -> String {
    format!("\u{E000}{i}\u{E001}")
}

pub fn tool() -> Tool {
    native(
        r#"
name: directives
description: Expands directives in the served skill's prompt by injecting their tools.
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, pipeline]
"#,
        |ctx, _args| async move {
            let target = ctx.ctx_target()?;
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
