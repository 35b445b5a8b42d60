//! The sandbox threads: where every sandbox call runs, and the kernel work scripts start
//! (`invoke`, `next`, and what those spawn), off the runtime that serves I/O, so a CPU-bound
//! script (a busy loop until its time limit) stalls neither health checks nor other requests,
//! the timers that stop it (the HTTP timeout, an abort) keep firing, and a script fanning out
//! thousands of invocations queues them behind its own work, not ahead of other clients'
//! requests.
//!
//! The threads are the workers of a tokio runtime of their own (`skillgate-sandbox-N`), rather
//! than a pool that lends a thread per call: a call holds a thread only while its JavaScript
//! runs, not while it awaits. That matters because sandbox calls nest (a script invoking a
//! `.skill.js` tool, script middleware calling `next()` into a scripted tool): with a thread held
//! per call, as many parked callers as threads would wait forever on callees queued behind them.
//! When every thread is busy, new calls wait in the runtime's queue and run as threads come free
//! (idle workers steal queued work).
//!
//! A script's kernel work is a task of this same runtime (see `bridge`), not of another one: it
//! is started on the thread the script runs on and, when the script awaits it, runs there next,
//! so an `await ctx.manager.invoke(...)` costs no hand-over to another thread and back (on a
//! 2-core machine those two wake-ups were a sixth of a `.skill.js` call). Its time is not the
//! script's: the meter counts only while the script's own task is polled (`limits::Metered`).
//!
//! Size: `SKILLGATE_SANDBOX_THREADS`, read once when the first call runs; else one per core,
//! at least 2.
//!
//! Calls waiting or running at once are bounded (`SKILLGATE_SANDBOX_QUEUE`, default 128 a
//! sandbox thread, at least 256: a call alive holds its own QuickJS runtime, a few hundred KiB):
//! past that a call is refused at once as busy (HTTP answers 503 with `Retry-After`), so a flood
//! of script calls can neither queue nor hold memory without end.
//!
//! On Linux the sandbox threads run at a lower scheduling priority than the threads that serve
//! I/O (`SKILLGATE_SANDBOX_NICE`, default 10; 0 keeps them equal): when scripts keep every core
//! busy, requests that run no script (health checks, markdown skills, streams) are still served
//! first, and scripts take what is left. They also run on every core but the first, which
//! they leave to the I/O threads (`SKILLGATE_SANDBOX_CPUS`, see `crate::cpus`).
//!
//! Dropping the future of [`run`] (the HTTP client went away, a timeout fired) cancels the call's
//! token: the call's meter then stops its script as it stops one for an abort, and the call ends
//! on its own, so a session still drains its queued work as after any stop.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{Result, SkillError};

/// The environment variable that sets how many sandbox threads there are.
pub const THREADS_VAR: &str = "SKILLGATE_SANDBOX_THREADS";

/// The environment variable that bounds the calls waiting or running at once.
pub const QUEUE_VAR: &str = "SKILLGATE_SANDBOX_QUEUE";

/// Calls waiting or running at once unless configured, per sandbox thread ...
const QUEUE_PER_THREAD: usize = 128;

/// ... and at least this many.
const MIN_QUEUE: usize = 256;

/// The environment variable that sets how much lower the sandbox threads' priority is (a
/// `nice` increment, 0 to 19).
pub const NICE_VAR: &str = "SKILLGATE_SANDBOX_NICE";

/// The sandbox threads' `nice` increment unless configured.
pub(super) const DEFAULT_NICE: i32 = 10;

/// Calls waiting or running at once unless configured: [`QUEUE_PER_THREAD`] a thread, at
/// least [`MIN_QUEUE`].
pub fn default_queue() -> usize {
    (QUEUE_PER_THREAD * threads()).max(MIN_QUEUE)
}

/// Calls waiting or running now.
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// The bound on [`QUEUED`] (0: not read yet).
static QUEUE_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// Sets the bound on calls waiting or running at once, overriding the variable (a process that
/// embeds the kernel; tests).
pub fn set_queue_limit(limit: usize) {
    QUEUE_LIMIT.store(limit.max(1), Ordering::Relaxed);
}

fn queue_limit() -> usize {
    match QUEUE_LIMIT.load(Ordering::Relaxed) {
        0 => {
            let limit = std::env::var(QUEUE_VAR)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
                .unwrap_or_else(default_queue);
            QUEUE_LIMIT.store(limit, Ordering::Relaxed);
            limit
        }
        limit => limit,
    }
}

/// One call counted in [`QUEUED`] until it ends.
struct Queued;

impl Drop for Queued {
    fn drop(&mut self) {
        QUEUED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The most threads the variable may ask for.
const MAX_THREADS: usize = 1024;

/// Native stack of a sandbox thread: QuickJS may use up to the `stack` limit's ceiling (1 MiB)
/// of it, with room to spare for the host code around it.
const THREAD_STACK: usize = 4 * 1024 * 1024;

static POOL: OnceLock<Runtime> = OnceLock::new();

/// How many sandbox threads run scripts.
pub fn threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let default = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        from_env(THREADS_VAR, "a number of threads", 1..=MAX_THREADS, default)
    })
}

/// `var` read as a number in `range`; `default` when unset, or (with a warning naming `what`
/// it must be) when it is not one.
fn from_env<T>(var: &str, what: &str, range: std::ops::RangeInclusive<T>, default: T) -> T
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let Ok(text) = std::env::var(var) else {
        return default;
    };
    match text.trim().parse::<T>() {
        Ok(n) if range.contains(&n) => n,
        _ => {
            tracing::warn!(
                value = %text,
                %default,
                "{var} must be {what} from {} to {}; using the default",
                range.start(),
                range.end()
            );
            default
        }
    }
}

/// The sandbox threads' `nice` increment: [`NICE_VAR`], else [`DEFAULT_NICE`].
pub(super) fn nice_increment() -> i32 {
    from_env(NICE_VAR, "a number", 0..=19, DEFAULT_NICE)
}

/// Lowers the calling thread's scheduling priority by `increment` (on Linux a thread's nice
/// value is its own: the I/O threads keep theirs). Best effort: elsewhere, or refused, the
/// thread keeps the process's priority.
pub(super) fn lower_priority(increment: i32) {
    #[cfg(target_os = "linux")]
    if increment > 0
        && let Err(err) = rustix::process::nice(increment)
    {
        tracing::debug!(%err, "the sandbox thread keeps the process's priority");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = increment;
}

fn pool() -> &'static Runtime {
    POOL.get_or_init(|| {
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
                format!("skillgate-sandbox-{}", NEXT.fetch_add(1, Ordering::Relaxed))
            })
            .thread_stack_size(THREAD_STACK)
            // The kernel work scripts start does I/O (stores, HTTP tools) and sets timers.
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start the {n} sandbox threads: {e}"))
    })
}

/// Runs `call` on the sandbox threads and waits for it. `call` gets a token that is cancelled
/// if this future is dropped first; it must stop soon after (the engine's meter watches it).
pub(crate) async fn run<T, F>(call: impl FnOnce(CancellationToken) -> F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let waiting = QUEUED.fetch_add(1, Ordering::AcqRel) + 1;
    let _queued = Queued;
    let limit = queue_limit();
    if waiting > limit {
        return Err(SkillError::busy(format!(
            "the sandbox is busy: {limit} script calls are waiting or running; try again shortly (`{QUEUE_VAR}`)"
        )));
    }
    let gone = CancellationToken::new();
    // The call continues the trace of its invocation.
    let task = pool().spawn(call(gone.clone()).in_current_span());
    // Cancels the token when this future is dropped before the call ends.
    let dropped = gone.drop_guard();
    let joined = task.await;
    dropped.disarm();
    match joined {
        Ok(out) => out,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Err(_) => Err(SkillError::internal(
            "the sandbox threads are shutting down",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_at_least_two_sandbox_threads_unless_configured() {
        if std::env::var(THREADS_VAR).is_err() {
            assert!(threads() >= 2);
        }
    }

    #[tokio::test]
    async fn calls_run_on_named_sandbox_threads() {
        let name = run(|_| async { Ok(std::thread::current().name().map(String::from)) })
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(name.starts_with("skillgate-sandbox-"), "{name}");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn sandbox_threads_run_at_a_lower_priority_than_the_io_threads() {
        if std::env::var(NICE_VAR).is_ok() {
            return;
        }
        let io = rustix::process::getpriority_process(None).unwrap();
        let sandbox = run(|_| async { Ok(rustix::process::getpriority_process(None).unwrap()) })
            .await
            .unwrap();
        // Lowered by the default increment, unless the process already sat near the floor.
        assert_eq!(sandbox, (io + DEFAULT_NICE).min(19), "io thread nice {io}");
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), io);
    }

    #[tokio::test]
    async fn sandbox_threads_run_on_the_cpus_kept_for_background_work() {
        let on = run(|_| async { Ok(crate::cpus::cpus_of(None)) })
            .await
            .unwrap();
        assert_eq!(on, crate::cpus::expected());
    }

    /// What a call spawns (as the bridge spawns a script's kernel work) is a task of the
    /// sandbox threads' runtime.
    #[tokio::test]
    async fn work_a_script_starts_runs_on_the_sandbox_threads() {
        let name = run(|_| async {
            let spawned = tokio::spawn(async { std::thread::current().name().map(String::from) });
            Ok(spawned.await.unwrap())
        })
        .await
        .unwrap()
        .unwrap_or_default();
        assert!(name.starts_with("skillgate-sandbox-"), "{name}");
    }

    #[tokio::test]
    async fn work_a_script_starts_may_do_io_and_blocking_work() {
        // Stores and HTTP tools need the I/O driver; `tokio::fs` needs blocking threads.
        let read = run(|_| async {
            let spawned = tokio::spawn(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                listener.local_addr()?;
                tokio::fs::read_to_string(file!()).await
            });
            Ok(spawned.await.unwrap())
        })
        .await
        .unwrap()
        .unwrap_or_default();
        assert!(read.contains("work_a_script_starts_may_do_io_and_blocking_work"));
    }

    #[tokio::test]
    async fn dropping_the_caller_cancels_the_calls_token() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let call = run(|gone| async move {
            gone.cancelled().await;
            let _ = tx.send(());
            Ok(())
        });
        // Started, then dropped before the call ends.
        let mut call = Box::pin(call);
        assert!(futures::poll!(call.as_mut()).is_pending());
        drop(call);
        rx.await.expect("the call saw its token cancelled");
    }
}
