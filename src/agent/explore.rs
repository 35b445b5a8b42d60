//! `skill-list` and `skill-describe`: how an agent in discovery mode (and anyone else) finds
//! tools. Each lists only what its caller may invoke: hidden tools, and tools the caller's
//! `allowed-tools` refuses, are left out.

use globset::Glob;
use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{ErrorKind, SkillError};
use crate::skills::native::native;
use crate::skills::patterns::ToolInfo;
use crate::skills::tool::Tool;

/// At most this many tools in one `skill-list` answer.
const MAX_LISTED: usize = 200;

pub fn list() -> Tool {
    native(
        r#"
name: skill-list
description: List the tools you may invoke (name and description), optionally those whose name matches a glob.
metadata:
  tags: [meta]
  params:
    type: object
    properties:
      pattern: { type: string, pattern: "^[a-z0-9*?-]*$", description: "A glob over tool names: `*` any run of characters, `?` one (`file-*`)." }
"#,
        |ctx, args| async move {
            let matcher = match args.get("pattern").and_then(Value::as_str) {
                Some(p) => Some(
                    Glob::new(p)
                        .map_err(|e| {
                            SkillError::new(ErrorKind::InvalidArgs, format!("pattern `{p}`: {e}"))
                        })?
                        .compile_matcher(),
                ),
                None => None,
            };
            let index = ctx.index();
            let mut tools: Vec<Value> = index
                .tools()
                .filter(|t| matcher.as_ref().is_none_or(|m| m.is_match(&t.name)))
                .filter(|t| reachable(&ctx, t))
                .map(|t| json!({ "name": t.name, "description": t.description }))
                .collect();
            tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            let total = tools.len();
            tools.truncate(MAX_LISTED);
            Ok(Some(json!({ "tools": tools, "total": total })))
        },
    )
}

pub fn describe() -> Tool {
    native(
        r#"
name: skill-describe
description: Describe one tool you may invoke - its description, params (JSON Schema), tags and where it comes from.
metadata:
  tags: [meta]
  params:
    type: object
    properties:
      name: { type: string }
    required: [name]
"#,
        |ctx, args| async move {
            let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
            let index = ctx.index();
            let tool = index
                .get(name)
                .filter(|t| reachable(&ctx, t))
                .ok_or_else(|| {
                    // Missing and beyond reach look alike, and are the caller's mistake.
                    SkillError::new(
                        ErrorKind::NotFound,
                        format!("no tool `{name}` you may invoke (see skill-list)"),
                    )
                    .with_data(json!({ "rule": "unreachable", "skill": name }))
                })?;
            Ok(Some(json!({
                "name": tool.name,
                "description": tool.description,
                "params": tool.params().cloned().unwrap_or(Value::Null),
                "returns": tool.metadata.get("returns").cloned().unwrap_or(Value::Null),
                "tags": tool.tags,
                "origin": tool.origin.get("uri").cloned().unwrap_or(Value::Null),
            })))
        },
    )
}

/// Whether whoever invoked `ctx` may invoke `tool`: not hidden, not the project's main skill,
/// admitted by the caller's `allowed-tools` (by name; arg constraints are checked at the call).
fn reachable(ctx: &Context, tool: &Tool) -> bool {
    if tool.is_main || tool.hidden || !ctx.authority().may_name(tool) {
        return false;
    }
    let allowed = ctx
        .parent()
        .and_then(|caller| caller.invoke_policy().allowed);
    match allowed {
        Some(allowed) if !allowed.is_empty() => allowed.admits_name(ToolInfo {
            name: &tool.name,
            tags: &tool.tags,
        }),
        _ => true,
    }
}
