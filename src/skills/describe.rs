//! What a skill looks like from outside: the summary in listings and the full description
//! (params and returns schemas from its cascade, its pipeline), shared by the CLI and HTTP.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::cascade;
use crate::skills::index::SearchIndex;
use crate::skills::tool::Tool;

/// Name, description, origin, tags, visibility.
pub fn summary(tool: &Tool) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "origin": tool.location(),
        "tags": tool.tags,
        "visibility": if tool.hidden { "hidden" } else { "public" },
    })
}

/// The summary plus `params`, `returns` (the effective schemas after the cascade) and
/// `pipeline` (the middleware chain), or `error` when the cascade cannot be resolved.
pub fn describe(index: &SearchIndex, tool: &Arc<Tool>) -> Value {
    let mut out = summary(tool);
    match cascade::resolved_for(index, tool) {
        Ok(resolved) => {
            let chain: Vec<&str> = resolved
                .entries
                .iter()
                .filter(|e| !e.is_sentinel())
                .map(|e| &*e.name)
                .collect();
            out["pipeline"] = json!(chain);
            for key in ["params", "returns"] {
                out[key] = resolved.metadata.get(key).cloned().unwrap_or(Value::Null);
            }
        }
        Err(err) => out["error"] = json!(err.to_string()),
    }
    out
}
