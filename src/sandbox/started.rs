//! The threads where the kernel work a script starts runs (`invoke`, `next`, and what those
//! spawn): a runtime of their own, at the sandbox threads' lower priority, apart from the
//! runtime that serves I/O.
//!
//! A script is the one kind of caller that can start work in a loop: a `.skill.js` fanning out
//! thousands of invocations, or emitting thousands of events, within its run's budget. Run on
//! the runtime that serves requests, each of those is a task queued ahead of the next request's,
//! so one busy script slowed every other client of the server. Here they queue among
//! themselves, and on Linux the operating system runs the I/O threads first whenever both
//! have work (`SKILLGATE_SANDBOX_NICE`, as for the sandbox threads): requests that start no
//! script, and the first steps of those that do, are served at the I/O threads' priority, and
//! scripts' work takes what is left.
//!
//! Size: as many threads as the sandbox has. The runtime lives as long as the process (like
//! the sandbox threads), so a task a script spawned never loses its runtime under it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Handle, Runtime};

use super::pool::{lower_priority, nice_increment, threads};

static STARTED: OnceLock<Runtime> = OnceLock::new();

/// The runtime that runs the kernel work scripts start.
pub(crate) fn handle() -> Handle {
    STARTED
        .get_or_init(|| {
            let n = threads();
            let nice = nice_increment();
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(n)
                .on_thread_start(move || {
                    lower_priority(nice);
                    crate::cpus::confine_this_thread();
                })
                .thread_name_fn(|| {
                    static NEXT: AtomicUsize = AtomicUsize::new(1);
                    format!(
                        "skillgate-script-work-{}",
                        NEXT.fetch_add(1, Ordering::Relaxed)
                    )
                })
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("cannot start the {n} threads of scripts' work: {e}"))
        })
        .handle()
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_a_script_starts_runs_on_threads_of_its_own() {
        let name = handle()
            .spawn(async { std::thread::current().name().map(String::from) })
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(name.starts_with("skillgate-script-work-"), "{name}");
    }

    #[tokio::test]
    async fn work_a_script_starts_runs_on_the_cpus_kept_for_background_work() {
        let on = handle()
            .spawn(async { crate::cpus::cpus_of(None) })
            .await
            .unwrap();
        assert_eq!(on, crate::cpus::expected());
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn work_a_script_starts_runs_at_a_lower_priority_than_the_io_threads() {
        if std::env::var(super::super::pool::NICE_VAR).is_ok() {
            return;
        }
        let io = rustix::process::getpriority_process(None).unwrap();
        let started = handle()
            .spawn(async { rustix::process::getpriority_process(None).unwrap() })
            .await
            .unwrap();
        assert_eq!(started, (io + super::super::pool::DEFAULT_NICE).min(19));
    }
}
