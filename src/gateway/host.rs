//! What every door runs on, whichever door it is: the gateway (kernel, metrics, readiness), the
//! access policy, how long a run may take, the signal that the server is stopping, and the
//! tracker of background work a shutdown drains. Doors take a `Host`, not the HTTP server's
//! state, so a door that does not serve HTTP does not need it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::gateway::Gateway;
use crate::gateway::policy::Policy;

/// Cheap to clone (reference counts).
#[derive(Clone)]
pub struct Host {
    pub gateway: Gateway,
    /// Which skills callers may reach.
    pub policy: Policy,
    /// How long a run a door waits for may take before it is aborted.
    pub timeout: Duration,
    /// Cancelled when the server stops: workers stop taking new work.
    pub stopping: CancellationToken,
    /// Workers and their runs, drained at shutdown.
    pub background: TaskTracker,
}
