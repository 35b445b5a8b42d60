//! The transport lifecycle every way in shares (HTTP with the doors on its listener, and each
//! door on a host of its own, see `door`): a transport is started by its own constructor (bind
//! a socket, connect to a service), which fails with a [`StartError`] naming it; then
//! [`Transport::run`] serves until told to stop, drains its in-flight work within the one
//! shutdown grace, and reports. [`Doors`](crate::server::Doors) starts every configured
//! transport and stops them together; each says in [`Readiness`] whether it is ready, and
//! `/readyz` shows them all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// A started transport.
#[async_trait]
pub trait Transport: Send {
    /// Its name in logs, errors and `/readyz` (`http`, `slack`).
    fn name(&self) -> &'static str;
    /// Serves until `stop` is cancelled, then stops taking new work and lets in-flight work
    /// finish for up to `grace`, then cuts it off.
    async fn run(self: Box<Self>, stop: CancellationToken, grace: Duration) -> Report;
}

/// How a transport's shutdown went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub transport: &'static str,
    /// True when all in-flight work finished within the grace period.
    pub drained: bool,
    /// Work still running when the grace ran out (0 when drained).
    pub abandoned: i64,
}

/// Why a transport could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{transport}: {message}")]
pub struct StartError {
    pub transport: &'static str,
    /// A mistake in the configuration (exit 2), or the world refused (exit 1: a port in use,
    /// a service that does not answer).
    pub config: bool,
    pub message: String,
}

impl StartError {
    pub fn config(transport: &'static str, message: impl Into<String>) -> StartError {
        StartError {
            transport,
            config: true,
            message: message.into(),
        }
    }

    pub fn runtime(transport: &'static str, message: impl Into<String>) -> StartError {
        StartError {
            transport,
            config: false,
            message: message.into(),
        }
    }
}

/// What state each transport is in, for `/readyz`. Cheap to clone (clones share it).
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<Mutex<BTreeMap<&'static str, State>>>);

/// A transport's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Starting,
    Ready,
    /// Stopped taking new work (shutting down).
    Stopping,
    /// Not able to serve; the reason is for the log, not for `/readyz`.
    Down,
    /// The remote service refused the credentials (a revoked or wrong token): no retry helps.
    Unauthorized,
}

impl Readiness {
    pub fn set(&self, transport: &'static str, state: State) {
        self.0.lock().insert(transport, state);
    }

    /// True when every transport that registered is ready.
    pub fn ready(&self) -> bool {
        self.0.lock().values().all(|s| *s == State::Ready)
    }

    /// `{ "http": "ready", ... }`.
    pub fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .0
            .lock()
            .iter()
            .map(|(name, state)| {
                let word = match state {
                    State::Starting => "starting",
                    State::Ready => "ready",
                    State::Stopping => "stopping",
                    State::Down => "down",
                    State::Unauthorized => "unauthorized",
                };
                ((*name).to_string(), json!(word))
            })
            .collect();
        Value::Object(map)
    }
}

/// Runs every transport until `stop`, then drains them all within `grace`; reports in the
/// order given.
pub async fn run_all(
    transports: Vec<Box<dyn Transport>>,
    stop: CancellationToken,
    grace: Duration,
) -> Vec<Report> {
    let runs = transports
        .into_iter()
        .map(|t| tokio::spawn(t.run(stop.clone(), grace)));
    let mut reports = Vec::new();
    for run in runs.collect::<Vec<_>>() {
        match run.await {
            Ok(report) => reports.push(report),
            Err(err) => tracing::error!(error = %err, "a transport task failed"),
        }
    }
    reports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_transport_is() {
        let r = Readiness::default();
        assert!(r.ready(), "nothing registered");
        r.set("http", State::Ready);
        r.set("slack", State::Starting);
        assert!(!r.ready());
        assert_eq!(r.to_json(), json!({ "http": "ready", "slack": "starting" }));
        r.set("slack", State::Ready);
        assert!(r.ready());
    }
}
