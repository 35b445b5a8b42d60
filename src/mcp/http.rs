//! `/mcp`: the MCP server over Streamable HTTP, a door served on the HTTP listener (a tower
//! service merged into its router, so the listener's API keys, rate limit, allowed hosts, CORS
//! and request ids apply to it as to every route). Stateless (no `Mcp-Session-Id`): each POST is answered on its own
//! stream, so replicas behind a load balancer need no sticky sessions, and a call's
//! notifications travel on the stream of that call.

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use axum::Router;
use axum::middleware::from_fn_with_state;

use crate::gateway::Gateway;
use crate::gateway::door::Door;
use crate::gateway::origin;
use crate::gateway::policy::Policy;
use crate::gateway::served::{HttpDoor, Listener};
use crate::mcp::SkillServer;

/// The door's name.
pub const NAME: &str = "mcp";

/// MCP on the HTTP listener, at [`PATH`].
pub struct McpDoor;

impl HttpDoor for McpDoor {
    /// `/mcp`, behind the cross-site check (the service does not check origins itself).
    fn routes(self: Arc<Self>, listener: &Listener) -> Router {
        let host = &listener.host;
        let mcp = service(
            host.gateway.clone(),
            host.policy.clone(),
            host.timeout,
            listener.body_limit,
            host.stopping.child_token(),
        );
        let guard = from_fn_with_state(listener.cors_origins.clone(), origin::guard);
        Router::new().nest_service(PATH, tower::Layer::layer(&guard, mcp))
    }
}

/// Its streams end when the listener's host stops; it has no work of its own to drain.
impl Door for McpDoor {
    fn name(&self) -> &'static str {
        NAME
    }
}

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
