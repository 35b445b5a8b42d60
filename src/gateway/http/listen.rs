//! The accept loop: at most `max-connections` connections at once (more wait in the listen
//! backlog), one HTTP/1.1-or-2 connection per socket, closed once it has had no request in
//! flight for the header timeout (a socket that never sends a byte included), a deadline on
//! each request body, the caller's address in each request, the router a reload put in force
//! for each request, and a graceful close of every connection once told to stop.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::gateway::body::Deadline;
use crate::gateway::http::activity::{Activity, Tracked};
use crate::gateway::metrics::Metrics;
use crate::gateway::peers::{ClientAddr, PerPeer, TrustedProxies};
use crate::gateway::receiving::Budget;

/// How connections are held to account.
#[derive(Debug, Clone)]
pub struct Limits {
    /// For a request's headers, and for a connection with nothing in flight.
    pub header_timeout: Duration,
    pub max_connections: usize,
    /// Connections one client address may hold (trusted proxies are not capped here).
    pub per_peer: usize,
    pub trusted: Arc<TrustedProxies>,
    /// Bytes of large request bodies being received, every connection together (`None`:
    /// unbudgeted).
    pub bodies: Option<Arc<Budget>>,
}

/// What each request is served with. A reload puts a new one in place: the next request,
/// on a new connection or a kept-alive one, is served by it; requests in flight finish on theirs.
pub struct Serving {
    pub router: Router,
    /// For a request's whole body, from its headers.
    pub body_timeout: Duration,
    /// Bytes a request body may have (what one of unknown length holds of the budget).
    pub body_limit: usize,
}

/// The [`Serving`] in force.
pub type LiveServing = Arc<ArcSwap<Serving>>;

/// Serves what `serving` holds on `listener` until `stop` is cancelled, then stops accepting,
/// asks every open connection to finish its in-flight requests and close, and returns when all
/// have.
pub async fn serve(
    listener: TcpListener,
    serving: LiveServing,
    limits: Limits,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_timeout)
        .keep_alive_timeout(limits.header_timeout)
        .enable_connect_protocol();
    let graceful = GracefulShutdown::new();
    let mut slots = Slots::new(limits.max_connections);
    let per_peer = PerPeer::new(limits.per_peer);
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => break,
            permit = slots.take() => permit,
        };
        let (socket, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // One address may not take every slot: past its cap, its new connections are closed at
        // once (a trusted proxy carries many clients and is not capped here).
        let held = if limits.trusted.trusts(peer.ip()) {
            None
        } else {
            match per_peer.take(peer.ip()) {
                Some(held) => Some(held),
                None => {
                    tracing::debug!(%peer, max = per_peer.max(), "closed a connection: this address holds max-connections-per-peer");
                    continue;
                }
            }
        };
        let _ = socket.set_nodelay(true);
        let serving = serving.clone();
        let trusted = limits.trusted.clone();
        let bodies = limits.bodies.clone();
        let activity = Activity::new(metrics.clone());
        let watched = activity.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let in_flight = activity.begin();
            let serving = serving.load();
            let client = trusted.client(peer.ip(), request.headers());
            let wait = request.version() < axum::http::Version::HTTP_2;
            let mut request = request.map(|body| {
                let body = Deadline::new(body, serving.body_timeout);
                Body::new(match &bodies {
                    Some(budget) => body.within(budget.clone(), client, serving.body_limit, wait),
                    None => body,
                })
            });
            let client = ClientAddr(client);
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(client);
            let call = serving.router.clone().oneshot(request);
            async move {
                let response = call.await?;
                Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
            }
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(socket), service)
            .into_owned();
        let connection = graceful.watch(connection);
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            tokio::select! {
                ended = connection => {
                    if let Err(err) = ended {
                        tracing::debug!(%peer, error = %err, "connection ended with an error");
                    }
                }
                // Before its first request hyper does not time a connection (it waits for the
                // bytes that tell HTTP/1 from HTTP/2), and HTTP/2 never times an idle one.
                () = watched.idle_for(header_timeout) => {
                    tracing::debug!(%peer, "closed a connection with no request in flight for the header timeout");
                }
            }
            // The socket is closed (dropped with the connection) before its slot is freed.
            drop(permit);
            drop(held);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The connection cap, with one log line when it is reached and one when it is not any more
/// (not one per connection).
struct Slots {
    free: Arc<Semaphore>,
    max: usize,
    full: bool,
}

impl Slots {
    fn new(max: usize) -> Slots {
        Slots {
            free: Arc::new(Semaphore::new(max)),
            max,
            full: false,
        }
    }

    /// A slot for the next connection; waits (not accepting, so new connections wait in the
    /// listen backlog) while every slot is taken.
    async fn take(&mut self) -> OwnedSemaphorePermit {
        if let Ok(permit) = self.free.clone().try_acquire_owned() {
            if std::mem::take(&mut self.full) {
                tracing::info!(
                    max_connections = self.max,
                    "below max-connections again: accepting connections"
                );
            }
            return permit;
        }
        if !std::mem::replace(&mut self.full, true) {
            tracing::warn!(
                max_connections = self.max,
                "max-connections ({}) reached: new connections wait in the listen backlog until one closes",
                self.max
            );
        }
        self.free
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }
}
