//! The timings of a run's chain entries (the onion: each middleware, body and `fn` entry of the
//! root skill and of every skill it invokes on the run's task, with its depth), gathered while
//! the run is awaited inside [`timed`], for the runs record.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{Value, json};

tokio::task_local! {
    /// The timings of the run this task is running, if they are gathered: a task-local rather
    /// than a context value, so an entry finds it without walking up its contexts.
    static TIMES: Arc<EntryTimes>;
}

/// Awaits `run` with its entries' timings gathered into `times`.
pub async fn timed<F: Future>(times: Arc<EntryTimes>, run: F) -> F::Output {
    TIMES.scope(times, run).await
}

/// The timings this task gathers, if any.
pub(crate) fn current() -> Option<Arc<EntryTimes>> {
    TIMES.try_with(Arc::clone).ok()
}

/// One entry's span.
#[derive(Debug, Clone)]
struct Timed {
    name: Arc<str>,
    kind: &'static str,
    skill: String,
    depth: u32,
    start_us: u64,
    end_us: u64,
    ok: bool,
}

/// The entries of one run as they finish.
#[derive(Debug)]
pub struct EntryTimes {
    started: Instant,
    entries: Mutex<Vec<Timed>>,
}

impl Default for EntryTimes {
    fn default() -> Self {
        EntryTimes {
            started: Instant::now(),
            entries: Mutex::new(Vec::new()),
        }
    }
}

impl EntryTimes {
    /// Microseconds since the run started.
    pub(crate) fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Keeps entry `name` (`kind`: `middleware`, `body` or `fn`) of `skill` at `depth`, from
    /// `start_us` to now.
    pub(crate) fn done(
        &self,
        (name, kind): (Arc<str>, &'static str),
        (skill, depth): (&str, u32),
        start_us: u64,
        ok: bool,
    ) {
        let end_us = self.now_us();
        self.entries.lock().push(Timed {
            name,
            kind,
            skill: skill.to_string(),
            depth,
            start_us,
            end_us,
            ok,
        });
    }

    /// The entries in the order they started (outer layers before the ones they wrap), each
    /// `{name, kind, skill, depth, startMs, durationMs, ok}` from the run's start.
    pub fn to_json(&self) -> Value {
        let mut entries = self.entries.lock().clone();
        entries.sort_by_key(|e| (e.start_us, e.depth));
        Value::Array(
            entries
                .iter()
                .map(|e| {
                    json!({
                        "name": &*e.name,
                        "kind": e.kind,
                        "skill": e.skill,
                        "depth": e.depth,
                        "startMs": e.start_us as f64 / 1000.0,
                        "durationMs": (e.end_us - e.start_us) as f64 / 1000.0,
                        "ok": e.ok,
                    })
                })
                .collect(),
        )
    }
}
