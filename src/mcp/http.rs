//! `/mcp`: the MCP server over Streamable HTTP, a tower service nested in the HTTP gateway's
//! router, so the gateway's API keys, rate limit, allowed hosts, CORS and request ids apply to
//! it as to every route. Stateless (no `Mcp-Session-Id`): each POST is answered on its own
//! stream, so replicas behind a load balancer need no sticky sessions, and a call's
//! notifications travel on the stream of that call.

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::gateway::policy::Policy;
use crate::mcp::SkillServer;

/// The path the service is mounted at.
pub const PATH: &str = "/mcp";

/// The service for `/mcp`; `stop` ends its open streams when the server stops.
pub fn service(
    gateway: Gateway,
    policy: Policy,
    timeout: Duration,
    body_limit: usize,
    stop: CancellationToken,
) -> StreamableHttpService<SkillServer, NeverSessionManager> {
    let server = SkillServer::new(gateway, policy, Some(timeout));
    // The gateway's own `hosts` layer decides which Host headers are served.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(body_limit)
        .with_cancellation_token(stop);
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
