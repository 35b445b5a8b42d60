//! The webhook door: the routes the main skill declares, served on the HTTP listener (each
//! authenticated by its signature, not a key), with a worker a route running its queue.

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::routing::post;

use crate::gateway::door::Door;
use crate::gateway::served::{HttpDoor, Listener};
use crate::gateway::transport::StartError;
use crate::gateway::webhook::routes::{self, WebhookRoute};
use crate::gateway::webhook::{NAME, intake, worker};
use crate::gateway::{Gateway, Host};
use crate::skills::index::SearchIndex;

/// Every webhook route of the project.
pub struct Webhooks {
    routes: Vec<Arc<WebhookRoute>>,
}

impl Webhooks {
    /// The routes the main skill of `project` declares, their queues made; `None` when it
    /// declares none. `taken` says which paths other routes already serve; every mistake is
    /// reported at once, each saying where.
    pub async fn configure(
        gateway: &Gateway,
        index: &SearchIndex,
        project: &Path,
        taken: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Option<Arc<Webhooks>>, StartError> {
        let (found, mistakes) = routes::collect(index, project, taken);
        if !mistakes.is_empty() {
            return Err(StartError::config(NAME, mistakes.join("\n")));
        }
        if found.is_empty() {
            return Ok(None);
        }
        let routes: Vec<Arc<WebhookRoute>> = found.into_iter().map(Arc::new).collect();
        for route in &routes {
            crate::gateway::queue::prepare(gateway, &worker::lane(route))
                .await
                .map_err(|e| StartError::runtime(NAME, format!("webhook queue: {e}")))?;
        }
        Ok(Some(Arc::new(Webhooks { routes })))
    }
}

/// What a route's handler shares: the route, the gateway and the listener's body limit.
#[derive(Clone)]
struct Endpoint {
    route: Arc<WebhookRoute>,
    gateway: Gateway,
    body_limit: usize,
}

impl HttpDoor for Webhooks {
    /// A `POST` route for each webhook.
    fn routes(self: Arc<Self>, listener: &Listener) -> Router {
        let mut router = Router::new();
        for route in &self.routes {
            let endpoint = Endpoint {
                route: route.clone(),
                gateway: listener.host.gateway.clone(),
                body_limit: listener.body_limit,
            };
            router = router.route(
                &route.path,
                post(
                    |State(on): State<Endpoint>,
                     headers: HeaderMap,
                     body: Result<Bytes, BytesRejection>| async move {
                        intake::intake(&on.gateway, &on.route, on.body_limit, &headers, body).await
                    },
                )
                .with_state(endpoint),
            );
        }
        router
    }

    fn paths(&self) -> Vec<(String, String)> {
        self.routes
            .iter()
            .map(|r| (format!("{}.path", r.declared_in), r.path.clone()))
            .collect()
    }

    /// A delivery is authenticated by its signature, not by an API key.
    fn authenticates_in_band(&self, path: &str) -> bool {
        self.routes.iter().any(|r| r.path == path)
    }
}

/// A worker a route, started with the HTTP listener and drained with it.
impl Door for Webhooks {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(self: Arc<Self>, host: &Host) {
        for route in &self.routes {
            crate::gateway::queue::spawn_jobs(
                host,
                worker::lane(route),
                route.clone(),
                worker::run,
            );
        }
    }
}
