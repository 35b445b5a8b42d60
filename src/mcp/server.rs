//! The MCP handler over the gateway core: `tools/list` shows the skills the caller may reach
//! (the same policy and key scopes as `GET /skills`), `tools/call` dispatches the skill as the
//! `mcp` transport and answers with its result, or with a tool error told as every transport
//! tells it (a server failure's cause stays in the log). Events of the run, an agent's
//! included (spec 05), are sent to the client as `notifications/message` while it runs.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use crate::context::id;
use crate::gateway::keys::Caller;
use crate::gateway::policy::{Policy, Scope};
use crate::gateway::{Gateway, GatewayError, Inbound, ReplyPart};
use crate::kernel::ToolRef;
use crate::skills::tool::Tool;

/// The project's skills as MCP tools.
/// How often a session with no news checks whether its client went away.
const CLOSED_CHECK: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct SkillServer {
    gateway: Gateway,
    policy: Policy,
    timeout: Option<Duration>,
}

impl SkillServer {
    pub fn new(gateway: Gateway, policy: Policy, timeout: Option<Duration>) -> SkillServer {
        SkillServer {
            gateway,
            policy,
            timeout,
        }
    }
}

/// The caller's scope: its API key's, when the request came through the HTTP auth layer;
/// every public skill otherwise (stdio: the local user).
fn scope(context: &RequestContext<RoleServer>) -> &Scope {
    Caller::scope(caller(context))
}

/// The HTTP request a call came in (`/mcp`); none on stdio.
fn http_parts(context: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    context.extensions.get::<axum::http::request::Parts>()
}

/// The HTTP caller, when the request came through the HTTP auth layer; none on stdio, which
/// runs for the local user (a caller without admin, never the project: a model drives it).
fn caller(context: &RequestContext<RoleServer>) -> Option<&Caller> {
    http_parts(context).and_then(|parts| parts.extensions.get::<Caller>())
}

/// The client address a call over `/mcp` counts against in run admission; none on stdio (the
/// local user alone).
fn client(context: &RequestContext<RoleServer>) -> Option<std::net::IpAddr> {
    http_parts(context)
        .and_then(|parts| parts.extensions.get::<crate::gateway::peers::ClientAddr>())
        .map(|client| client.0)
}

/// A skill as an MCP tool: its name, description and params schema (an object schema, as MCP
/// requires; a skill without params takes any object).
pub fn tool_of(tool: &Tool) -> rmcp::model::Tool {
    let mut schema: JsonObject = match tool.params() {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    rmcp::model::Tool::new(tool.name.clone(), tool.description.clone(), schema)
}

impl ServerHandler for SkillServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("skillgate", env!("CARGO_PKG_VERSION")))
        .with_instructions("Each tool is a skill of this skillgate project.")
    }

    /// Tells a stdio client when the skills change (a hot reload):
    /// `notifications/tools/list_changed` once per new generation, until the session ends.
    /// `/mcp` over HTTP is stateless: no stream outlives a request to carry it.
    fn on_initialized(
        &self,
        context: rmcp::service::NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if context
            .extensions
            .get::<axum::http::request::Parts>()
            .is_some()
        {
            return std::future::ready(());
        }
        let kernel = self.gateway.kernel.clone();
        let peer = context.peer;
        let mut changes = kernel.registry().changes();
        changes.mark_unchanged();
        tokio::spawn(async move {
            while !peer.is_transport_closed() {
                tokio::select! {
                    changed = changes.changed() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep(CLOSED_CHECK) => {}
                }
            }
        });
        std::future::ready(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let index = self.gateway.kernel.registry().current();
        let scope = scope(&context);
        // Only what the caller may call: the control plane is for an admin key.
        let admin = Caller::principal(caller(&context)).admin();
        let tools = self.policy.listing(&index, scope, admin);
        Ok(ListToolsResult::with_all_items(
            tools.into_iter().map(|t| tool_of(t)).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let index = self.gateway.kernel.registry().current();
        let tool = self
            .policy
            .reach(&index, &request.name, scope(&context))
            .map_err(|refusal| {
                ErrorData::invalid_params(GatewayError::from(refusal).public_detail(), None)
            })?;
        let request_id = id::format(id::next_id());
        let mut fields = Map::new();
        fields.insert("method".into(), json!("tools/call"));
        fields.insert("tool".into(), json!(tool.name));
        let authority = self
            .policy
            .authority(&tool, Caller::principal(caller(&context)));
        let inbound = Inbound {
            transport: "mcp",
            skill: ToolRef::Name(Arc::from(tool.name.as_str())),
            tool: Some(tool.clone()),
            authority,
            args: Value::Object(request.arguments.unwrap_or_default()),
            request: fields,
            request_id: request_id.clone(),
            reply_to: Value::Null,
            announce: None,
            follow: true,
            duplex: false,
            session: None,
            timeout: self.timeout,
            client: client(&context),
        };
        let mut dispatch = self.gateway.dispatch(inbound);
        loop {
            let part = tokio::select! {
                part = dispatch.parts.recv() => part,
                // Dropping the dispatch aborts the run.
                () = context.ct.cancelled() => {
                    return Err(ErrorData::internal_error("the client cancelled the call", None));
                }
            };
            match part {
                Some(ReplyPart::Event(event)) => {
                    notify(&context.peer, &tool.name, json!({ "event": event })).await;
                }
                Some(ReplyPart::Message(message) | ReplyPart::Chunk(message)) => {
                    notify(&context.peer, &tool.name, json!({ "message": message })).await;
                }
                Some(ReplyPart::Done(Ok(result))) => {
                    let value = result.map_or(Value::Null, Arc::unwrap_or_clone);
                    return Ok(answer(value).into());
                }
                Some(ReplyPart::Done(Err(err))) => {
                    let error = GatewayError::from_run(&err, &tool.name, &request_id);
                    let text = ContentBlock::text(error.public_detail());
                    return Ok(CallToolResult::error(vec![text]).into());
                }
                Some(_) => {}
                None => {
                    return Err(ErrorData::internal_error(
                        "the run ended without an answer",
                        None,
                    ));
                }
            }
        }
    }
}

/// A result as MCP content: a string as text; anything else as JSON text and structured
/// content.
fn answer(value: Value) -> CallToolResult {
    match value {
        Value::String(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Value::Null => CallToolResult::success(Vec::new()),
        other => CallToolResult::structured(other),
    }
}

/// Sends one `notifications/message` (logger: the skill); a client that went away is not an
/// error of the run.
async fn notify(peer: &Peer<RoleServer>, skill: &str, data: Value) {
    #[allow(deprecated)] // logging notifications are what MCP clients show today
    let sent = {
        use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
        peer.notify_logging_message(
            LoggingMessageNotificationParam::new(LoggingLevel::Info, data).with_logger(skill),
        )
        .await
    };
    if let Err(err) = sent {
        tracing::debug!(skill, "an MCP notification was not sent: {err}");
    }
}
