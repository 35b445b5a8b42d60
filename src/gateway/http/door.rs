//! A door served on the HTTP listener beside HTTP's own routes (the WebSocket endpoint, Slack's
//! Events API): what the HTTP server asks of it without naming it, beside the life every
//! [`Door`] has (the HTTP server starts, closes and drains it with its own). The doors are handed
//! to [`Server::bind`](crate::gateway::http::Server::bind) by whoever composes the server.

use std::sync::Arc;

use crate::gateway::door::Door;
use crate::gateway::http::state::AppState;
use axum::Router;

pub trait HttpDoor: Door {
    /// Adds the door's routes to the server's.
    fn routes(self: Arc<Self>, router: Router<AppState>) -> Router<AppState>;

    /// The paths the door serves, each with the setting that names it: the server refuses to
    /// start when one is already served (a custom route, a webhook, its own routes).
    fn paths(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// True for a request to `path` that authenticates inside the door's own protocol (a
    /// WebSocket's first frame) rather than with a header: it passes the key check without one.
    fn authenticates_in_band(&self, path: &str) -> bool {
        let _ = path;
        false
    }
}
