//! A run's deadline: when the door that started it stops waiting for the answer. Long waits
//! inside the run (`event-wait`, `gateway-receive`) end a little before it, so the caller gets
//! their answer (an empty one) instead of a timeout.

use std::time::Duration;

use tokio::time::Instant;

use crate::context::Context;

/// Where a door puts the deadline on a run's root context (a nonlocal: every context below
/// finds it).
pub const DEADLINE_PATH: &str = "nonlocals.request.deadline";

/// How long before the deadline a wait gives up, so that its answer still reaches the caller.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// The instant a door stops waiting for the run.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

impl Context {
    /// `wanted`, shortened to end [`ANSWER_MARGIN`] before the run's deadline when it has one.
    pub fn bounded_wait(&self, wanted: Duration) -> Duration {
        match self.extension::<Deadline>(DEADLINE_PATH) {
            Some(deadline) => wanted.min(
                deadline
                    .0
                    .saturating_duration_since(Instant::now())
                    .saturating_sub(ANSWER_MARGIN),
            ),
            None => wanted,
        }
    }
}
