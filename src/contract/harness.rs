//! What a harness is asked to do for the rules, and how it tells what its client saw.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

use crate::Kernel;
use crate::contract::Project;

/// How a transport answered an invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The skill's result.
    Ok(Value),
    /// Refused or failed, in the transport's own error form: the kind and the whole text the
    /// client received (to check nothing internal leaked).
    Refused(Refusal, String),
}

/// Why a transport refused or failed an invocation, as its client can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No credential, or a wrong one.
    Credential,
    /// No such skill, or one the caller may not reach (hidden, middleware).
    NotFound,
    /// The args were refused (schema, directive keys).
    InvalidArgs,
    /// A policy refused the call (the control plane without `admin`, a topic out of grants).
    Denied,
    /// The skill failed.
    Failed,
}

/// One part of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// A message the run sent (`gateway-send`) or a chunk it streamed.
    Message(Value),
    /// The final part: the outcome.
    Final(Outcome),
}

/// What a harness starts: credentials required or not, and the signals of the `held` skill.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    pub credentials: bool,
    pub held: Held,
}

/// `held` notifies `started` when it runs, then answers once `release` is notified.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub started: Arc<Notify>,
    pub release: Arc<Notify>,
}

/// Which credential a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    Valid,
    Missing,
    Wrong,
}

/// A door under test: a real server and a real client.
// The rules await the harness on the test's own thread: its futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Harness: Sized {
    /// The transport's name in `nonlocals.gateway.transport`.
    const NAME: &'static str;
    /// True when spec 03 lists the transport among those that emit `gateway-message`.
    const ANNOUNCES: bool;

    async fn start(project: Project, setup: Setup) -> Self;
    fn kernel(&self) -> &Kernel;
    async fn invoke(&self, skill: &str, args: Value, credential: Credential) -> Outcome;
    /// Invokes with streaming and collects every part until the final one.
    async fn stream(&self, skill: &str, args: Value) -> Vec<Part>;
    /// Starts an invocation that finishes later; `finish` waits for its outcome.
    fn start_invoke(&self, skill: &str, args: Value) -> tokio::task::JoinHandle<Outcome>;
    /// Tells the transport to stop: no new work is taken, in-flight work may finish.
    fn begin_shutdown(&mut self);
    /// Waits for the stop; true when everything in flight drained within the grace period.
    async fn finish(self) -> bool;

    async fn shutdown(mut self) -> bool {
        self.begin_shutdown();
        self.finish().await
    }
}

/// Long enough for anything that should happen; only reached when something is broken.
pub const GUARD: Duration = Duration::from_secs(20);
