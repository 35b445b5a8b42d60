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
use tokio::sync::Notify;
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

/// What state each transport is in, for `/readyz`; an embedder can also wait for a state
/// ([`Readiness::until`]). Cheap to clone (clones share it).
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    doors: Mutex<BTreeMap<&'static str, State>>,
    /// The server was told to stop and still takes work, so a balancer takes it out first.
    draining: std::sync::atomic::AtomicBool,
    /// Woken at every change.
    changed: Notify,
}

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
        let changed = self.0.doors.lock().insert(transport, state.clone()) != Some(state);
        if changed {
            self.0.changed.notify_waiters();
        }
    }

    /// True when every transport that registered is ready and the server is not draining.
    pub fn ready(&self) -> bool {
        !self.draining() && self.0.doors.lock().values().all(|s| *s == State::Ready)
    }

    /// Marks the server as draining: told to stop, still taking work, not ready.
    pub fn drain(&self) {
        self.0
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.0.changed.notify_waiters();
    }

    /// Whether the server is draining ([`Readiness::drain`]).
    pub fn draining(&self) -> bool {
        self.0.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The state of `transport`, when it registered.
    pub fn state(&self, transport: &str) -> Option<State> {
        self.0.doors.lock().get(transport).cloned()
    }

    /// Waits until `done` holds, looked at now and after every change (no polling). Callers
    /// bound the wait themselves (a transport may never reach a state).
    pub async fn until(&self, done: impl Fn(&Readiness) -> bool) {
        loop {
            let changed = self.0.changed.notified();
            tokio::pin!(changed);
            // Registered before looking, so a change in between is not missed.
            changed.as_mut().enable();
            if done(self) {
                return;
            }
            changed.await;
        }
    }

    /// `{ "http": "ready", ... }`.
    pub fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .0
            .doors
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

    #[tokio::test]
    async fn a_waiter_wakes_when_its_state_is_reached_and_not_before() {
        let r = Readiness::default();
        r.set("slack", State::Starting);
        let waiter = tokio::spawn({
            let r = r.clone();
            async move {
                r.until(|r| r.state("slack") == Some(State::Unauthorized))
                    .await
            }
        });
        r.set("slack", State::Ready);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "woken by a change to another state");
        r.set("slack", State::Unauthorized);
        tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("woken by the change it waits for")
            .unwrap();
    }
}
