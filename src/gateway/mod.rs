//! The transports and what they share: an inbound message is verified by its transport, then
//! [`dispatch::Gateway::dispatch`] fills the context, announces it, runs the routed skill and
//! hands the reply parts back for the transport to deliver.
//!
//! - [`edge`]: what is refused of outside input before anything runs (`$` keys in args).
//! - [`policy`]: which skills a caller may reach, and how a failed run is told to it.
//! - [`principal`]: who a chat user, a mail sender or a webhook route is, as principals.
//! - [`error`]: [`GatewayError`], what the gateway answers instead of a result.
//! - [`dispatch`]: the shared steps 2–5 and the [`dispatch::Inbound`] every transport builds.
//! - [`reply`]: the reply channel, the raw response handle at `nonlocals.request.res`.
//! - [`send`]: the `gateway-send` and `web-send` tools.
//! - [`metrics`]: Prometheus metrics of requests and invocations, shared by all transports.
//! - [`host`]: what every door runs on (gateway, policy, timeout, stopping, background work).
//! - [`transport`]: the lifecycle every transport shares (start, readiness, run, drain,
//!   report), and running them together.
//! - [`http`]: the HTTP transport (`skillgate serve`).
//! - [`ws`]: the WebSocket transport, `/ws` on the HTTP listener.
//! - [`webhook`]: signed webhooks, queued and run from the event store.

pub mod dispatch;
pub mod edge;
pub mod email;
pub mod error;
pub mod host;
pub mod http;
pub mod metrics;
pub mod policy;
pub mod principal;
pub mod queue;
pub mod reply;
pub mod send;
pub mod slack;
pub mod transport;
pub mod webhook;
pub mod ws;

pub use dispatch::{Dispatch, Gateway, Inbound};
pub use error::GatewayError;
pub use host::Host;
pub use reply::{Reply, ReplyPart};

/// The HTTP server with the doors served on its listener that `config` asks for (Slack when the
/// project has Slack routes, the WebSocket endpoint unless `websocket.enabled` is off): what
/// `skillgate serve` binds.
pub async fn bind_http(
    gateway: Gateway,
    config: http::HttpConfig,
    project: &std::path::Path,
) -> Result<http::Server, http::startup::StartError> {
    let mut doors: Vec<std::sync::Arc<dyn http::door::HttpDoor>> = Vec::new();
    let index = gateway.kernel.registry().current();
    if let Some(slack) = slack::setup::configure(&gateway, &index, project, config.slack.clone())
        .await
        .map_err(http::startup::StartError::Slack)?
    {
        doors.push(slack);
    }
    if config.websocket.enabled {
        doors.push(std::sync::Arc::new(ws::Hub::new(
            config.websocket.clone(),
            gateway.metrics.ws_queued(),
        )));
    }
    http::Server::bind(gateway, config, project, doors).await
}
