//! A door served on the HTTP listener beside HTTP's own routes (the WebSocket endpoint, Slack's
//! Events API, webhooks, MCP): what the HTTP door asks of it without naming it, and what the
//! listener shares with it ([`Listener`]). Beside this, such a door has the life every
//! [`Door`] has; the HTTP door starts, closes and drains it with its own connections.

use std::path::Path;
use std::sync::Arc;

use axum::Router;

use crate::gateway::door::Door;
use crate::gateway::host::Host;
use crate::gateway::keys::LiveKeys;
use crate::skills::index::SearchIndex;

/// What the HTTP listener shares with the doors it serves: the host every door runs on, the
/// keys it checks (a door that authenticates in its own protocol checks them itself), its
/// body limit and the origins its CORS settings allow.
#[derive(Clone)]
pub struct Listener {
    pub host: Host,
    /// The keys in force (a reload replaces them).
    pub keys: LiveKeys,
    /// Bytes a request body may have.
    pub body_limit: usize,
    /// `cors-origins`: browser origins allowed to call (`*`: any).
    pub cors_origins: Arc<[String]>,
}

pub trait HttpDoor: Door {
    /// The door's routes, with their own state: the HTTP door merges them into its router
    /// under its layers (hosts, keys, rate limit, body limit, request ids).
    fn routes(self: Arc<Self>, listener: &Listener) -> Router;

    /// The paths the door serves, each with the setting that names it: the server refuses to
    /// start when one is already served (a custom route, another door's, its own routes).
    fn paths(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// True for a request to `path` that authenticates inside the door's own protocol (a
    /// WebSocket's first frame, a signature) rather than with a key: it passes the key check
    /// without one.
    fn authenticates_in_band(&self, path: &str) -> bool {
        let _ = path;
        false
    }

    /// A reload: the door takes what the skills of `index` declare now (its routes are asked
    /// again next). `taken` says which paths other routes and doors serve. On a mistake the
    /// door keeps what it had. Called off the runtime.
    fn reload(
        self: Arc<Self>,
        project: (&SearchIndex, &Path),
        taken: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<(), String> {
        let _ = (project, taken);
        Ok(())
    }
}
