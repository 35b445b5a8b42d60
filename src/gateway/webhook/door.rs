//! The webhook door: the routes the main skill declares, served on the HTTP listener (each
//! authenticated by its signature, not a key), with a worker a route running its queue; a
//! reload serves the routes the main skill declares then.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

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

/// Every webhook route of the project: the routes a reload finds are served from then on, each
/// with a worker running its queue.
pub struct Webhooks {
    routes: ArcSwap<Vec<Arc<WebhookRoute>>>,
    /// Each route's worker by its queue's topic, once the door started: a reload that drops the
    /// route stops it.
    workers: Mutex<HashMap<String, CancellationToken>>,
    /// Where workers run, from the start on.
    host: OnceLock<Host>,
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
        let routes =
            declared(gateway, index, project, taken)
                .await
                .map_err(|(config, message)| {
                    if config {
                        StartError::config(NAME, message)
                    } else {
                        StartError::runtime(NAME, message)
                    }
                })?;
        if routes.is_empty() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Webhooks {
            routes: ArcSwap::from_pointee(routes),
            workers: Mutex::default(),
            host: OnceLock::new(),
        })))
    }

    /// The route whose deliveries queue on `topic`, as the routes are now.
    fn route_of(&self, topic: &str) -> Option<Arc<WebhookRoute>> {
        self.routes
            .load()
            .iter()
            .find(|r| r.topic == topic)
            .cloned()
    }

    /// Starts the worker of `route` on `host`, stopped by a reload that drops the route. It
    /// runs each delivery with the route as it is then (its skill, path and scheme).
    fn start_worker(self: &Arc<Self>, host: &Host, route: &WebhookRoute) {
        let stop = host.stopping.child_token();
        let host = Host {
            stopping: stop.clone(),
            ..host.clone()
        };
        let state = Arc::new((Arc::downgrade(self), route.topic.clone()));
        crate::gateway::queue::spawn_jobs(
            &host,
            worker::lane(route),
            state,
            |host, state, queued, delivery| {
                let route = state.0.upgrade().and_then(|door| door.route_of(&state.1));
                async move {
                    // A route a reload dropped: its worker is stopping, and the delivery comes
                    // back (to the route, if it returns) after the visibility timeout.
                    if let Some(route) = route {
                        worker::run(host, route, queued, delivery).await;
                    }
                }
            },
        );
        self.workers.lock().insert(route.topic.clone(), stop);
    }
}

/// The routes `project` declares, their queues made; a mistake (`true`) or a store failure.
async fn declared(
    gateway: &Gateway,
    index: &SearchIndex,
    project: &Path,
    taken: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Vec<Arc<WebhookRoute>>, (bool, String)> {
    let (found, mistakes) = routes::collect(index, project, taken);
    if !mistakes.is_empty() {
        return Err((true, mistakes.join("\n")));
    }
    let routes: Vec<Arc<WebhookRoute>> = found.into_iter().map(Arc::new).collect();
    for route in &routes {
        crate::gateway::queue::prepare(gateway, &worker::lane(route))
            .await
            .map_err(|e| (false, format!("webhook queue: {e}")))?;
    }
    Ok(routes)
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
        for route in self.routes.load().iter() {
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
            .load()
            .iter()
            .map(|r| (format!("{}.path", r.declared_in), r.path.clone()))
            .collect()
    }

    /// A delivery is authenticated by its signature, not by an API key.
    fn authenticates_in_band(&self, path: &str) -> bool {
        self.routes.load().iter().any(|r| r.path == path)
    }

    /// The routes the main skill declares now: new ones get their queue and worker, dropped
    /// ones lose their worker, changed ones run their next delivery as they now are.
    fn reload(
        self: Arc<Self>,
        (index, project): (&SearchIndex, &Path),
        taken: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<(), String> {
        let gateway = match self.host.get() {
            Some(host) => host.gateway.clone(),
            None => return Ok(()),
        };
        // Called off the runtime (a reload runs on a blocking thread).
        let routes = tokio::runtime::Handle::current()
            .block_on(declared(&gateway, index, project, taken))
            .map_err(|(_, message)| message)?;
        self.routes.store(Arc::new(routes.clone()));
        let mut workers = self.workers.lock();
        workers.retain(|topic, stop| {
            let kept = routes.iter().any(|r| r.topic == *topic);
            if !kept {
                stop.cancel();
            }
            kept
        });
        let new: Vec<Arc<WebhookRoute>> = routes
            .iter()
            .filter(|r| !workers.contains_key(&r.topic))
            .cloned()
            .collect();
        drop(workers);
        if let Some(host) = self.host.get() {
            for route in &new {
                self.start_worker(host, route);
            }
        }
        Ok(())
    }
}

/// A worker a route, started with the HTTP listener and drained with it.
impl Door for Webhooks {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(self: Arc<Self>, host: &Host) {
        let _ = self.host.set(host.clone());
        for route in self.routes.load().iter() {
            self.start_worker(host, route);
        }
    }
}
