//! Every open WebSocket of a server: the connection cap, the budgets the sockets share, the
//! invocations in flight, and the shutdown that stops taking new work, lets running
//! invocations answer, then closes the sockets (1001), within the server's one grace period.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use prometheus_client::metrics::gauge::Gauge;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::websocket::WsConfig;
use crate::gateway::metrics::WsGauges;
use crate::gateway::ws::intake::Budget;

pub struct Hub {
    pub config: WsConfig,
    slots: Arc<Semaphore>,
    tracker: TaskTracker,
    closing: CancellationToken,
    in_flight: AtomicI64,
    /// Sockets each client address has open.
    pub per_peer: Arc<crate::gateway::peers::PerPeer>,
    /// Bytes queued to every socket together (see `outbox`), exported in `/metrics`.
    pub queued: Gauge<i64, AtomicI64>,
    /// Bytes of large messages being received on every socket together (see `intake`).
    pub receiving: Arc<Budget>,
}

impl Hub {
    pub fn new(config: WsConfig, gauges: WsGauges) -> Hub {
        Hub {
            receiving: Budget::new(
                config.total_receive_bytes,
                config.peer_receive_bytes,
                config.idle_timeout,
                gauges.receiving,
                gauges.receive_waiting,
            ),
            queued: gauges.queued,
            slots: Arc::new(Semaphore::new(config.max_connections)),
            per_peer: crate::gateway::peers::PerPeer::new(config.max_connections_per_peer),
            config,
            tracker: TaskTracker::new(),
            closing: CancellationToken::new(),
            in_flight: AtomicI64::new(0),
        }
    }

    /// A slot for one more socket, if the cap allows it.
    pub fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// Sockets open now.
    pub fn open(&self) -> usize {
        self.config.max_connections - self.slots.available_permits()
    }

    /// Runs a connection, counted until it ends.
    pub fn track<F>(&self, connection: F) -> impl Future<Output = F::Output> + use<F>
    where
        F: Future,
    {
        self.tracker.track_future(connection)
    }

    /// Stops taking new sockets and work; open sockets close once their invocations answered.
    pub fn begin_close(&self) {
        self.closing.cancel();
        self.tracker.close();
    }

    pub fn is_closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    pub fn closing(&self) -> &CancellationToken {
        &self.closing
    }

    /// Resolves once every socket closed (after [`Hub::begin_close`]).
    pub async fn drained(&self) {
        self.tracker.wait().await;
    }

    /// Invocations running over WebSockets now.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts an invocation until the returned guard drops.
    pub fn begin_run(self: &Arc<Self>) -> RunGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        RunGuard(self.clone())
    }
}

/// One invocation in flight (see [`Hub::begin_run`]).
pub struct RunGuard(Arc<Hub>);

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
