//! How a failed run is told to its caller, whatever the transport: the caller's mistakes (its
//! args, a policy refusing what it asked) are told with the error's message; a timeout and an
//! abort are told as such; anything else is the server's failure, whose message may hold
//! anything (paths, addresses, a skill's own `fail` text) and so never reaches the caller.
//!
//! A skill the caller names that it may not reach is refused before any run (see
//! [`super::access`]); a `not-found` raised while running means a skill the run needs is
//! missing: the server's failure, not the caller's.

use crate::error::{ErrorKind, SkillError};

/// The class of a failed run, which each transport answers in its own form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The args the caller sent fail the invoked skill's params (or use `$` keys). The message
    /// names the fields and shows only what the caller sent.
    InvalidArgs,
    /// A policy (allowed-tools, untrusted refs, reserved topics) refused a call; the message
    /// says which.
    Denied,
    /// A skill the caller named (directly, or as the `ref` of work it stores) is missing or
    /// beyond its reach; the two are told alike.
    NotFound,
    /// The run took longer than the transport allows and was aborted.
    Timeout,
    /// The run was aborted: the server is shutting down, or the client went away.
    Aborted,
    /// The run went over its budget (invocations, bytes, time: see `kernel::budget`); what the
    /// caller asked for needs more than one run may spend.
    OverBudget,
    /// The server is too busy to take the run now (the sandbox queue is full); try again.
    Busy,
    /// A service the run depends on (an MCP server, a model vendor) could not be reached or did not answer in
    /// time. Which one is for the log: the caller is told only that, and may try again.
    Upstream,
    /// Anything else. The cause goes to the log, never to the caller.
    Internal,
}

impl Failure {
    /// The class of `err`, from a run of `skill` (the skill the caller invoked).
    pub fn of(err: &SkillError, skill: &str) -> Failure {
        match err.kind() {
            // Only the invoked skill's own params check is about what the caller sent; bad args
            // to a skill it invokes are a fault of the server's skills.
            ErrorKind::InvalidArgs if err.tool().is_none_or(|t| t == skill) => Failure::InvalidArgs,
            ErrorKind::Denied => Failure::Denied,
            ErrorKind::NotFound if unreachable(err) => Failure::NotFound,
            ErrorKind::Aborted if timed_out(err) => Failure::Timeout,
            ErrorKind::Aborted => Failure::Aborted,
            ErrorKind::Failed if over_budget(err) => Failure::OverBudget,
            ErrorKind::Failed if busy(err) => Failure::Busy,
            ErrorKind::Failed if err.is_upstream() => Failure::Upstream,
            ErrorKind::InvalidArgs
            | ErrorKind::Failed
            | ErrorKind::NotFound
            | ErrorKind::InvalidReturns
            | ErrorKind::Config
            | ErrorKind::Immutable
            | ErrorKind::NoAgentProvider
            | ErrorKind::Internal => Failure::Internal,
        }
    }

    /// The slug of the problem type a failure of this class is answered with over HTTP
    /// (`/docs#problem-<slug>`), and recorded with in the runs record.
    pub fn slug(self) -> &'static str {
        match self {
            Failure::InvalidArgs => "invalid-args",
            Failure::Denied => "denied",
            Failure::NotFound => "not-found",
            Failure::Timeout => "timeout",
            Failure::Aborted => "aborted",
            Failure::OverBudget => "over-budget",
            Failure::Busy => "unavailable",
            Failure::Upstream => "upstream-unavailable",
            Failure::Internal => "internal",
        }
    }

    /// True when the error's message may be shown to the caller.
    pub fn shows_message(self) -> bool {
        !matches!(self, Failure::Internal | Failure::Upstream)
    }
}

/// Whether the kernel or the gateway marked `err` with `key: value` in its data.
fn marked(err: &SkillError, key: &str, value: impl Into<serde_json::Value>) -> bool {
    err.data().and_then(|d| d.get(key)) == Some(&value.into())
}

/// The kernel marks a ref refused to an authority below the project's (see
/// `kernel::authority::Authority::reach`).
fn unreachable(err: &SkillError) -> bool {
    marked(err, "rule", "unreachable")
}

/// The kernel marks a run over its budget with `{"limit": "budget"}`.
fn over_budget(err: &SkillError) -> bool {
    marked(err, "limit", "budget")
}

/// A call refused because the server is full is marked `{"limit": "busy"}` (`SkillError::busy`).
fn busy(err: &SkillError) -> bool {
    marked(err, "limit", "busy")
}

/// The gateway marks the abort of a run that ran out of time with `{"timeout": true}`.
fn timed_out(err: &SkillError) -> bool {
    marked(err, "timeout", true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What the caller is told of an error of each kind raised by the skill it invoked.
    fn expected(kind: ErrorKind) -> Failure {
        match kind {
            ErrorKind::InvalidArgs => Failure::InvalidArgs,
            ErrorKind::Denied => Failure::Denied,
            ErrorKind::Aborted => Failure::Aborted,
            // Unmarked failures, a missing skill met while running, bad returns, config:
            // the server's.
            _ => Failure::Internal,
        }
    }

    #[test]
    fn every_kind_of_the_invoked_skill_has_its_class() {
        for kind in ErrorKind::ALL {
            let own = SkillError::new(kind, "m").with_tool("hello");
            assert_eq!(Failure::of(&own, "hello"), expected(kind), "{kind:?}");
            let untagged = SkillError::new(kind, "m");
            assert_eq!(Failure::of(&untagged, "hello"), expected(kind), "{kind:?}");
        }
    }

    #[test]
    fn bad_args_to_a_skill_the_run_invokes_are_internal() {
        let nested = SkillError::new(ErrorKind::InvalidArgs, "m").with_tool("helper");
        assert_eq!(Failure::of(&nested, "hello"), Failure::Internal);
    }

    #[test]
    fn a_service_the_run_depends_on_being_down_is_upstream_at_any_depth() {
        let own =
            SkillError::upstream("MCP server HTTP db.internal:9000 refused").with_tool("hello");
        assert_eq!(Failure::of(&own, "hello"), Failure::Upstream);
        let nested = SkillError::upstream("MCP server stdio `x`: cannot start it")
            .with_tool("helper")
            .prefixed("`hello` (skills/hello.skill.md): ");
        assert_eq!(Failure::of(&nested, "hello"), Failure::Upstream);
        assert!(!Failure::Upstream.shows_message());
    }

    #[test]
    fn an_abort_marked_as_a_timeout_is_a_timeout() {
        let err = SkillError::new(ErrorKind::Aborted, "slow").with_data(json!({ "timeout": true }));
        assert_eq!(Failure::of(&err, "hello"), Failure::Timeout);
    }

    #[test]
    fn only_internal_failures_hide_their_message() {
        for failure in [
            Failure::InvalidArgs,
            Failure::Denied,
            Failure::Timeout,
            Failure::Aborted,
            Failure::OverBudget,
            Failure::Busy,
        ] {
            assert!(failure.shows_message(), "{failure:?}");
        }
        assert!(!Failure::Internal.shows_message());
    }
}
