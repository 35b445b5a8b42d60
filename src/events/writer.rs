//! The thread the embedded SQLite store's batch writer runs on (`skillgate-store`): a runtime
//! of its own, on the cores kept for background work (`crate::cpus`), beside the SQLite
//! connection's own thread.
//!
//! Why: every emit of the process goes through the writer task (gathering the batch, turning
//! each event into its stored JSON, driving the statement, answering the emitters). On the
//! runtime that serves I/O that work sat on the doors' threads: under a thousand streams of a
//! chatty skill it was a tenth of their time (`perf record`), paid in the latency of every
//! other client. Here it runs at the I/O threads' priority (so a door's intake claim does not
//! wait behind scripts), but off the core the I/O threads keep.

use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

/// The writer thread's name.
pub const THREAD: &str = "skillgate-store";

static WRITER: OnceLock<Runtime> = OnceLock::new();

/// The runtime the store's writer tasks run on (started at the first call, kept for the
/// process's life, like the sandbox threads).
pub fn handle() -> Handle {
    WRITER
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name(THREAD)
                .on_thread_start(crate::cpus::confine_this_thread)
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("cannot start the store's writer thread: {e}"))
        })
        .handle()
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_writer_runs_on_a_thread_of_its_own_on_the_cpus_kept_for_background_work() {
        let (name, cpus) = handle()
            .spawn(async {
                (
                    std::thread::current().name().map(String::from),
                    crate::cpus::cpus_of(None),
                )
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some(THREAD));
        assert_eq!(cpus, crate::cpus::expected());
    }
}
