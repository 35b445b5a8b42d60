//! A door served on the HTTP listener beside HTTP's own routes (the WebSocket endpoint): what
//! the HTTP server asks of it without naming it. The doors are handed to
//! [`Server::bind`](crate::gateway::http::Server::bind) by whoever composes the server.

use std::sync::Arc;

use axum::Router;
use futures::future::BoxFuture;

use crate::gateway::Host;
use crate::gateway::http::state::AppState;

pub trait HttpDoor: Send + Sync + 'static {
    /// Adds the door's routes to the server's.
    fn routes(self: Arc<Self>, router: Router<AppState>) -> Router<AppState>;

    /// The paths the door serves, each with the setting that names it: the server refuses to
    /// start when one is already served (a custom route, a webhook, its own routes).
    fn paths(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The server runs: start the door's background work (workers, its own connections).
    fn start(self: Arc<Self>, host: &Host) {
        let _ = host;
    }

    /// True for a request to `path` that authenticates inside the door's own protocol (a
    /// WebSocket's first frame) rather than with a header: it passes the key check without one.
    fn authenticates_in_band(&self, path: &str) -> bool {
        let _ = path;
        false
    }

    /// Shutdown began: take no new connections or work.
    fn begin_close(&self) {}

    /// Invocations running through the door now (counted as abandoned when the shutdown grace
    /// runs out).
    fn in_flight(&self) -> i64 {
        0
    }

    /// Resolves once the door's connections are done (after [`HttpDoor::begin_close`]).
    fn drained(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
