//! The operations listener: `/healthz`, `/readyz` and `/metrics` on an address of their own
//! (`serve --ops-bind`), for probes and scrapers where the HTTP door is off (`--no-http`) or
//! faces the public. It asks for no key, so it belongs on loopback or a private network; it
//! serves nothing else, and a connection gets the same header deadline and caps as HTTP's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::gateway::http::{listen, ops};
use crate::gateway::transport::{Report, StartError, Transport};

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
}

impl OpsListener {
    pub async fn bind(gateway: Gateway, addr: SocketAddr) -> Result<OpsListener, StartError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| StartError::runtime(NAME, format!("cannot listen on {addr}: {e}")))?;
        Ok(OpsListener { listener, gateway })
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
        let OpsListener { listener, gateway } = *self;
        let metrics = gateway.metrics.clone();
        let router = Router::new()
            .route("/healthz", get(ops::healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(render_metrics))
            .fallback(ops::not_found)
            .with_state(gateway);
        let limits = listen::Limits {
            header_timeout: HEADER_TIMEOUT,
            body_timeout: HEADER_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            per_peer: PER_PEER,
            trusted: Arc::default(),
        };
        // Whoever runs the doors stops this last, so probes see them stopping and drained.
        listen::serve(listener, router, limits, metrics, stop).await;
        Report {
            transport: NAME,
            drained: true,
            abandoned: 0,
        }
    }
}

async fn readyz(State(gateway): State<Gateway>) -> Response {
    ops::readiness(&gateway).await
}

/// Every skill's metrics: the listener is the operator's, so no key is asked.
async fn render_metrics(State(gateway): State<Gateway>) -> Response {
    (
        [(header::CONTENT_TYPE, ops::OPENMETRICS)],
        gateway.metrics.render(),
    )
        .into_response()
}
