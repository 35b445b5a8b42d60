//! A mounted server's tools as skillgate tools: `<mount>-<tool>` (the server's name turned into
//! a tool name), `run.origin.uri = mcp://<mount>/<tool>`, the server's input schema as `params`
//! (so `validate-args` checks args before they are sent) and its output schema as `returns`.
//! The body calls the server; its answer becomes the result.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::FutureExt;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

use crate::error::{ErrorKind, Result, SkillError};
use crate::mcp::client::mount::Mount;
use crate::mcp::client::server::Server;
use crate::skills::index::Layered;
use crate::skills::tool::{Body, NativeFn, Source, Tool};

/// `<mount>-<tool>`, with the server's name for the tool lowercased, camelCase split and any
/// other character made a `-` (`searchIssues`, `search_issues` -> `search-issues`); `None`
/// when nothing of the name is left.
pub fn skill_name(mount: &str, tool: &str) -> Option<String> {
    let mut out = format!("{mount}-");
    let start = out.len();
    let mut prev_lower = false;
    for c in tool.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            prev_lower = true;
        } else {
            if !out.ends_with('-') {
                out.push('-');
            }
            prev_lower = false;
        }
    }
    while out.ends_with('-') && out.len() > start {
        out.pop();
    }
    (out.len() > start).then_some(out)
}

/// The tools `listed` by `server` as mounted by `mount` (only those of `mount.only`, when
/// given). Two server tools that come out with the same name: the first is kept.
pub fn tools_of(server: &Arc<Server>, mount: &Mount, listed: &[rmcp::model::Tool]) -> Layered {
    let mut tools: Vec<Arc<Tool>> = Vec::new();
    for remote in listed {
        if mount
            .only
            .as_ref()
            .is_some_and(|only| !only.iter().any(|n| n == remote.name.as_ref()))
        {
            continue;
        }
        let Some(name) = skill_name(&mount.name, &remote.name) else {
            tracing::warn!(mount = %mount.name, tool = %remote.name, "an MCP tool name gives no skill name; not mounted");
            continue;
        };
        if tools.iter().any(|t| t.name == name) {
            tracing::warn!(mount = %mount.name, tool = %remote.name, "two MCP tools come out as `{name}`; the first is mounted");
            continue;
        }
        tools.push(Arc::new(tool_of(server, mount, remote, name)));
    }
    for wanted in mount.only.iter().flatten() {
        if !listed.iter().any(|t| t.name.as_ref() == wanted.as_str()) {
            tracing::warn!(mount = %mount.name, "`mcp.{}.tools` names `{wanted}`, which the server does not list", mount.name);
        }
    }
    tools.into()
}

fn tool_of(server: &Arc<Server>, mount: &Mount, remote: &rmcp::model::Tool, name: String) -> Tool {
    let uri = format!("mcp://{}/{}", mount.name, remote.name);
    let description = remote
        .description
        .as_deref()
        .map(str::to_string)
        .or_else(|| remote.title.clone())
        .unwrap_or_default();
    let mut metadata = Map::new();
    metadata.insert(
        "params".into(),
        Value::Object((*remote.input_schema).clone()),
    );
    if let Some(output) = &remote.output_schema {
        metadata.insert("returns".into(), Value::Object((**output).clone()));
    }
    metadata.insert("tags".into(), json!(["mcp"]));
    let mut frontmatter = Map::new();
    frontmatter.insert("name".into(), Value::String(name.clone()));
    frontmatter.insert("description".into(), Value::String(description));
    frontmatter.insert("metadata".into(), Value::Object(metadata));
    let body = call_body(
        Arc::downgrade(server),
        remote.name.to_string(),
        name,
        mount.timeout,
    );
    Tool::new(frontmatter, Source::Mcp(uri), None, Body::Native(body))
}

fn call_body(
    server: Weak<Server>,
    remote: String,
    name: String,
    timeout: Option<Duration>,
) -> NativeFn {
    let remote: Arc<str> = remote.into();
    let name: Arc<str> = name.into();
    Arc::new(move |_ctx, args| {
        let (server, remote, name) = (server.clone(), remote.clone(), name.clone());
        async move {
            let Some(server) = server.upgrade() else {
                return Err(SkillError::new(
                    ErrorKind::Internal,
                    format!("`{name}`: its MCP server is no longer mounted"),
                ));
            };
            let args = match &*args {
                Value::Object(map) => map.clone(),
                Value::Null => Map::new(),
                other => {
                    return Err(SkillError::new(
                        ErrorKind::InvalidArgs,
                        format!("`{name}` takes an object of args, got {other}"),
                    ));
                }
            };
            let result = server.call(&remote, args, timeout).await?;
            answer(&name, result).map(Some)
        }
        .boxed()
    })
}

/// A call's answer as a result: the structured content when there is some; else the text
/// (the blocks joined by new lines) when all content is text; else the content blocks as
/// JSON. A tool error (`isError`) fails the skill with the server's text.
pub fn answer(name: &str, result: CallToolResult) -> Result<Value> {
    let texts: Option<Vec<&str>> = result
        .content
        .iter()
        .map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        let text = texts.map(|t| t.join("\n")).unwrap_or_default();
        return Err(SkillError::new(
            ErrorKind::Failed,
            format!("`{name}` answered with an error: {text}"),
        )
        .with_data(json!({ "content": result.content })));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    match texts {
        Some(texts) if texts.is_empty() => Ok(Value::Null),
        Some(texts) => Ok(Value::String(texts.join("\n"))),
        None => serde_json::to_value(&result.content).map_err(|e| {
            SkillError::new(
                ErrorKind::Internal,
                format!("`{name}`: content not readable: {e}"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    #[test]
    fn server_tool_names_become_tool_names() {
        assert_eq!(
            skill_name("gh", "search_issues").unwrap(),
            "gh-search-issues"
        );
        assert_eq!(skill_name("gh", "getWeather").unwrap(), "gh-get-weather");
        assert_eq!(skill_name("fs", "files.read").unwrap(), "fs-files-read");
        assert_eq!(skill_name("fs", "HTTPGet2").unwrap(), "fs-httpget2");
        assert_eq!(skill_name("fs", "__x__").unwrap(), "fs-x");
        assert_eq!(skill_name("fs", "__"), None);
    }

    #[test]
    fn structured_content_wins_over_text() {
        let result = CallToolResult::structured(json!({ "sum": 3 }));
        assert_eq!(answer("t", result).unwrap(), json!({ "sum": 3 }));
    }

    #[test]
    fn text_blocks_are_joined() {
        let result =
            CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(answer("t", result).unwrap(), json!("a\nb"));
        assert_eq!(
            answer("t", CallToolResult::success(vec![])).unwrap(),
            Value::Null
        );
    }

    #[test]
    fn a_tool_error_fails_with_the_servers_text() {
        let result = CallToolResult::error(vec![ContentBlock::text("disk full")]);
        let err = answer("fs-write", result).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Failed);
        assert!(err.message().contains("disk full"), "{err}");
    }
}
