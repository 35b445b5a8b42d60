//! The operations listener: `/healthz`, `/readyz` and `/metrics` on an address of their own
//! (`serve --ops-bind`), for probes and scrapers where the HTTP door is off (`--no-http`) or
//! faces the public. The probes ask for no key (as on HTTP, where they are public and say which
//! check failed, never where). `/metrics` names every skill: on a loopback address it is open;
//! anywhere else it asks, as on HTTP, for a key with every skill or `admin`. It serves nothing
//! else, and a connection gets a header deadline and connection caps as on HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::gateway::http::auth::bearer_token;
use crate::gateway::http::{listen, ops};
use crate::gateway::keys::LiveKeys;
use crate::gateway::transport::{Report, StartError, Transport};
use crate::gateway::{Gateway, GatewayError};

/// The listener's name in logs and errors (it is not listed in `/readyz`: it is what answers).
pub const NAME: &str = "ops";

/// Connections the listener holds at once, and from one address.
const MAX_CONNECTIONS: usize = 64;
const PER_PEER: usize = 16;
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound operations listener, not yet serving.
pub struct OpsListener {
    listener: TcpListener,
    gateway: Gateway,
    /// Who may read `/metrics`: `None` on loopback (anyone there).
    keys: Option<LiveKeys>,
}

/// What the handlers share.
#[derive(Clone)]
struct Ops {
    gateway: Gateway,
    keys: Option<LiveKeys>,
}

impl OpsListener {
    /// Binds `addr`; off loopback, `/metrics` asks for one of `keys`.
    pub async fn bind(
        gateway: Gateway,
        addr: SocketAddr,
        keys: &LiveKeys,
    ) -> Result<OpsListener, StartError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| StartError::runtime(NAME, format!("cannot listen on {addr}: {e}")))?;
        let keys = (!addr.ip().is_loopback()).then(|| keys.clone());
        Ok(OpsListener {
            listener,
            gateway,
            keys,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }
}

#[async_trait::async_trait]
impl Transport for OpsListener {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn run(self: Box<Self>, stop: CancellationToken, _grace: Duration) -> Report {
        let OpsListener {
            listener,
            gateway,
            keys,
        } = *self;
        let metrics = gateway.metrics.clone();
        let router = Router::new()
            .route("/healthz", get(ops::healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(render_metrics))
            .fallback(ops::not_found)
            .with_state(Ops { gateway, keys });
        let limits = listen::Limits {
            header_timeout: HEADER_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            per_peer: PER_PEER,
            trusted: Arc::default(),
            // Probes and scrapes send no bodies worth a budget.
            bodies: None,
        };
        // Whoever runs the doors stops this last, so probes see them stopping and drained.
        let serving = listen::Serving {
            router,
            body_timeout: HEADER_TIMEOUT,
            body_limit: 0,
        };
        let serving = Arc::new(arc_swap::ArcSwap::from_pointee(serving));
        listen::serve(listener, serving, limits, metrics, stop).await;
        Report {
            transport: NAME,
            drained: true,
            abandoned: 0,
        }
    }
}

async fn readyz(State(ops): State<Ops>) -> Response {
    ops::readiness(&ops.gateway).await
}

/// Every skill's metrics: on loopback to anyone; elsewhere to a key with every skill or `admin`.
async fn render_metrics(State(ops): State<Ops>, headers: HeaderMap) -> Response {
    if let Some(keys) = &ops.keys {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let allowed = presented
            .and_then(|k| keys.current().verify(k).cloned())
            .is_some_and(|key| ops::may_read_metrics(key.principal()));
        if !allowed {
            return GatewayError::Unauthorized {
                presented: presented.is_some(),
            }
            .into_response();
        }
    }
    ops::render_metrics(&ops.gateway)
}
