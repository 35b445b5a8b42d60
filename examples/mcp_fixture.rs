//! A small MCP server over stdio, written for skillgate's tests of mounted servers (and a short
//! example of what a skill's `metadata.mcp` can mount). Tools: `add` (structured result with
//! an output schema), `echo`, `fail` (a tool error), `pid` (which process answers), `env` (a
//! variable of its environment), `slow` (answers after `ms`), `exit` (ends the process
//! without answering) and `grow` (adds the tool `extra` and tells the client its tools
//! changed).
//!
//! Run: `cargo run --example mcp_fixture` and speak MCP on its stdin and stdout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Default)]
struct Fixture {
    grown: AtomicBool,
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn tools(grown: bool) -> Vec<Tool> {
    let mut add = Tool::new(
        "add",
        "Adds two integers.",
        object(json!({
            "type": "object",
            "properties": { "a": { "type": "integer" }, "b": { "type": "integer" } },
            "required": ["a", "b"],
        })),
    );
    add.output_schema = Some(Arc::new(object(json!({
        "type": "object",
        "properties": { "sum": { "type": "integer" } },
        "required": ["sum"],
    }))));
    let text_arg = |name: &str| {
        object(json!({
            "type": "object",
            "properties": { name: { "type": "string" } },
            "required": [name],
        }))
    };
    let mut tools = vec![
        add,
        Tool::new("echo", "Says the text back.", text_arg("text")),
        Tool::new("fail", "Always fails.", object(json!({ "type": "object" }))),
        Tool::new(
            "pid",
            "The server's process id.",
            object(json!({ "type": "object" })),
        ),
        Tool::new(
            "env",
            "A variable of the server's environment.",
            text_arg("name"),
        ),
        Tool::new(
            "slow",
            "Answers after `ms` milliseconds.",
            object(json!({ "type": "object", "properties": { "ms": { "type": "integer" } } })),
        ),
        Tool::new(
            "exit",
            "Ends the server without answering.",
            object(json!({ "type": "object" })),
        ),
        Tool::new(
            "grow",
            "Adds the tool `extra`.",
            object(json!({ "type": "object" })),
        ),
    ];
    if grown {
        tools.push(Tool::new(
            "extra",
            "Added by `grow`.",
            object(json!({ "type": "object" })),
        ));
    }
    tools
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("skillgate-mcp-fixture", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools(
            self.grown.load(Ordering::SeqCst),
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let text = |s: String| CallToolResult::success(vec![ContentBlock::text(s)]);
        let result = match request.name.as_ref() {
            "add" => {
                let (Some(a), Some(b)) = (
                    args.get("a").and_then(Value::as_i64),
                    args.get("b").and_then(Value::as_i64),
                ) else {
                    return Err(ErrorData::invalid_params(
                        "`a` and `b` must be integers",
                        None,
                    ));
                };
                CallToolResult::structured(json!({ "sum": a + b }))
            }
            "echo" => text(
                args.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
            ),
            "fail" => {
                CallToolResult::error(vec![ContentBlock::text("the fixture failed on purpose")])
            }
            "pid" => text(std::process::id().to_string()),
            "env" => {
                let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
                text(std::env::var(name).unwrap_or_else(|_| "<unset>".into()))
            }
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text(format!("slept {ms} ms"))
            }
            "exit" => std::process::exit(3),
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                if let Err(err) = context.peer.notify_tool_list_changed().await {
                    eprintln!("list_changed not sent: {err}");
                }
                text("grown".into())
            }
            "extra" => text("extra here".into()),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let service = Fixture::default().serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    // A server that does not end when its client goes away (its stdin closes), as some do:
    // only its client can end it.
    if std::env::var_os("FIXTURE_OUTLIVE_CLIENT").is_some() {
        std::future::pending::<()>().await;
    }
    Ok(())
}
