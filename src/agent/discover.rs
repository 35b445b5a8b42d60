//! Which tools an agent may use and how they are shown to the model (spec 05, Tool Discovery):
//! one filter for the documentation and for what the agent's code may invoke, constrained and
//! discovery modes, self-recursion excluded unless asked for.

use std::sync::Arc;

use serde_json::Value;

use crate::error::{Result, SkillError};
use crate::skills::index::SearchIndex;
use crate::skills::patterns::{AllowedTools, ToolInfo};
use crate::skills::tool::Tool;

/// The exploration tools discovery mode adds.
pub const EXPLORE: [&str; 2] = ["skill-list", "skill-describe"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An explicit tool list: every matching tool is documented.
    Constrained,
    /// No `allowed-tools`, or a bare `*`: only explicitly named tools are documented; the
    /// model explores with `skill-list` and `skill-describe`.
    Discovery,
}

pub(crate) struct Discovery {
    pub mode: Mode,
    /// Tools documented in the prompt with their params.
    pub documented: Vec<Arc<Tool>>,
    /// `role: middleware` tools with params, documented apart.
    pub middleware: Vec<Arc<Tool>>,
    /// The `allowed-tools` the agent's code runs under: the skill's patterns, then a deny rule
    /// for each tool they would admit that the agent may not use.
    pub allowed: Value,
}

/// Applies the filter to every tool of `index`.
///
/// `skill` is the skill whose pipeline started the agent; `excluded` the agent skills
/// themselves (the policy and its provider), never offered.
pub(crate) fn discover(
    index: &SearchIndex,
    allowed: &Value,
    skill: &str,
    excluded: &[&str],
) -> Result<Discovery> {
    let declared = !allowed.is_null() && allowed.as_str().is_none_or(|s| !s.trim().is_empty());
    let policy = if declared {
        Some(AllowedTools::parse(allowed).map_err(|e| {
            SkillError::config(format!("allowedTools of the agent of `{skill}`: {e}"))
        })?)
    } else {
        None
    };
    let mode = match &policy {
        Some(p) if !p.is_empty() && !p.has_bare_star() => Mode::Constrained,
        _ => Mode::Discovery,
    };
    let named = |name: &str| policy.as_ref().is_some_and(|p| p.names_explicitly(name));
    let admitted = |tool: &Tool| {
        policy.as_ref().is_none_or(|p| {
            p.admits_name(ToolInfo {
                name: &tool.name,
                tags: &tool.tags,
            })
        })
    };
    let mut documented = Vec::new();
    let mut middleware = Vec::new();
    let mut denied = Vec::new();
    for tool in index.tools() {
        let visible = usable(tool, skill, excluded, &named);
        if !admitted(tool) {
            continue;
        }
        if !visible {
            denied.push(format!("!{}", tool.name));
            continue;
        }
        let shown = match mode {
            Mode::Constrained => true,
            Mode::Discovery => named(&tool.name) || EXPLORE.contains(&tool.name.as_str()),
        };
        if !shown {
            continue;
        }
        if is_middleware(tool) {
            if tool.params().is_some() {
                middleware.push(tool.clone());
            }
        } else {
            documented.push(tool.clone());
        }
    }
    documented.sort_by(|a, b| a.name.cmp(&b.name));
    middleware.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rules: Vec<Value> = match allowed {
        Value::Array(items) => items.clone(),
        Value::String(s) if declared => vec![Value::String(s.clone())],
        _ => vec![Value::String("*".into())],
    };
    rules.extend(denied.into_iter().map(Value::String));
    Ok(Discovery {
        mode,
        documented,
        middleware,
        allowed: Value::Array(rules),
    })
}

/// The visibility part of the filter: hidden tools only when named, never the agent itself,
/// the skill that started it only when named, never the project's main skill.
fn usable(tool: &Tool, skill: &str, excluded: &[&str], named: &dyn Fn(&str) -> bool) -> bool {
    if excluded.contains(&tool.name.as_str()) || tool.is_main {
        return false;
    }
    if tool.name == skill {
        return named(skill);
    }
    !tool.hidden || named(&tool.name)
}

fn is_middleware(tool: &Tool) -> bool {
    tool.metadata.get("role").and_then(Value::as_str) == Some("middleware")
}

/// The part of the system prompt that teaches the model its one tool and lists the others.
pub(crate) fn instructions(found: &Discovery, returns: Option<&Value>) -> String {
    let mut out = String::from(
        "\n\n## How you act\n\
         You have one tool, `invoke`. Its `code` is the body of an async JavaScript function with `ctx` in scope. \
         Call a tool with `await ctx.manager.invoke('tool-name', { ...args })` (bare tool names only); \
         `return` a value to see it, or call `ctx.manager.finish(value)` to end the task with that value. \
         A global `memory` object keeps values between runs. `console.log` output comes back to you. \
         Throw an Error to report a failure.\n",
    );
    if !found.documented.is_empty() {
        out.push_str("\n## Tools\n");
        for tool in &found.documented {
            document(&mut out, tool);
        }
    }
    if !found.middleware.is_empty() {
        out.push_str(
            "\n## Middleware tools\nThese run around other tools when a skill's metadata asks for them; \
             your code cannot start them itself (it may not pass invoke options). They are listed so you \
             know what their params mean when a tool's result mentions them.\n",
        );
        for tool in &found.middleware {
            document(&mut out, tool);
        }
    }
    if found.mode == Mode::Discovery {
        out.push_str(
            "\n## Finding tools\nMore tools exist than are listed. `await ctx.manager.invoke('skill-list', { pattern: 'glob*' })` \
             lists them (name and description); `await ctx.manager.invoke('skill-describe', { name })` gives one's params.\n",
        );
    }
    if let Some(schema) = returns {
        out.push_str(&format!(
            "\n## Result\nEnd the task by running code that calls `ctx.manager.finish(value)` where value matches this JSON Schema:\n{}\n",
            serde_json::to_string(schema).unwrap_or_default()
        ));
    }
    out
}

fn document(out: &mut String, tool: &Tool) {
    out.push_str(&format!("\n### {}\n", tool.name));
    if !tool.description.is_empty() {
        out.push_str(&tool.description);
        out.push('\n');
    }
    match tool.params() {
        Some(params) => out.push_str(&format!(
            "params: {}\n",
            serde_json::to_string(params).unwrap_or_default()
        )),
        None => out.push_str("params: none\n"),
    }
}
