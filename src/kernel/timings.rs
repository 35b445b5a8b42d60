//! What the runs record gathers of a run while it is awaited inside [`timed`]: the timings of
//! its chain entries (the onion: each middleware, body and `fn` entry of the root skill and of
//! every skill it invokes on the run's task, with its depth), its model calls (provider, model,
//! tokens, time) and its log events.

use futures::future::Either;
use quanta::Instant;
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

tokio::task_local! {
    /// The timings of the run this task is running, if they are gathered: a task-local rather
    /// than a context value, so an entry finds it without walking up its contexts.
    static TIMES: Arc<EntryTimes>;
}

/// `run`, with its entries' timings gathered into `times` while it is awaited (bare when the
/// run gathers none). A plain `fn` rather than an `async fn` or an `async` block choosing
/// between the two, either of which would hold `run` twice (as its argument and as what it
/// awaits): every future that awaits a run would carry the extra copy, and move it.
pub fn timed<F: Future>(times: Option<Arc<EntryTimes>>, run: F) -> impl Future<Output = F::Output> {
    match times {
        Some(times) => Either::Left(TIMES.scope(times, run)),
        None => Either::Right(run),
    }
}

/// Where a run's [`EntryTimes`] sit on its root context, for what runs off the run's task (a
/// sandbox's thread) and still belongs to the run.
pub const RECORD_PATH: &str = "nonlocals.runs.gathered";

/// What the run of `ctx` gathers, if anything: this task's, else its root context's.
pub fn of(ctx: &crate::context::Context) -> Option<Arc<EntryTimes>> {
    current().or_else(|| ctx.extension::<EntryTimes>(RECORD_PATH))
}

/// The timings this task gathers, if any.
pub fn current() -> Option<Arc<EntryTimes>> {
    TIMES.try_with(Arc::clone).ok()
}

/// Microseconds since the start of the run this task gathers for, if it gathers: where an
/// entry's span starts (the timings borrowed, not counted as one more reference: this runs
/// on every entry).
pub(crate) fn entry_start() -> Option<u64> {
    TIMES.try_with(|times| times.now_us()).ok()
}

/// Keeps an entry that started at `start_us` (from [`entry_start`]) and ends now, in the
/// timings this task gathers.
pub(crate) fn entry_done(entry: Entry<'_>, start_us: u64) {
    let _ = TIMES.try_with(|times| times.done(entry, start_us));
}

/// A chain entry as [`entry_done`] keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub name: &'a str,
    /// `middleware`, `body` or `fn`.
    pub kind: &'static str,
    /// The skill whose chain it is.
    pub skill: &'a str,
    pub depth: u32,
    pub ok: bool,
}

/// One entry's span. Its names are ranges of [`Gathered::text`]: copying a few bytes costs a
/// run less than counting references to names every run on every core shares.
#[derive(Debug, Clone, Copy)]
struct Timed {
    name: (u32, u32),
    skill: (u32, u32),
    kind: &'static str,
    depth: u32,
    start_us: u64,
    end_us: u64,
    ok: bool,
}

/// The entries of a run so far, and the text of their names.
#[derive(Debug, Default)]
struct Gathered {
    entries: Vec<Timed>,
    text: String,
    /// The range of the last entry's skill name: most entries belong to the skill before them.
    last_skill: Option<(u32, u32)>,
}

impl Gathered {
    fn keep(&mut self, name: &str) -> (u32, u32) {
        let start = self.text.len() as u32;
        self.text.push_str(name);
        (start, self.text.len() as u32)
    }

    fn name(&self, (start, end): (u32, u32)) -> &str {
        &self.text[start as usize..end as usize]
    }
}

/// Log events a run keeps at most (the first ones; the rest are counted).
pub const MAX_LOGS: usize = 100;

/// The entries, model calls and log events of one run as they happen.
#[derive(Debug)]
pub struct EntryTimes {
    /// On the CPU's counter where it is steady (`quanta`): read twice for every entry, it
    /// costs a run less than the operating system's clock.
    started: Instant,
    entries: Mutex<Gathered>,
    turns: Mutex<Vec<Value>>,
    logs: Mutex<(Vec<Arc<Value>>, usize)>,
}

impl Default for EntryTimes {
    fn default() -> Self {
        EntryTimes::since(Instant::now())
    }
}

impl EntryTimes {
    /// The timings of a run that started at `started` (its record's start: one clock read a
    /// run fewer).
    pub fn since(started: Instant) -> EntryTimes {
        EntryTimes {
            started,
            // A small run's chain (its layers and body) fits without growing.
            entries: Mutex::new(Gathered {
                entries: Vec::with_capacity(8),
                text: String::with_capacity(128),
                last_skill: None,
            }),
            turns: Mutex::new(Vec::new()),
            logs: Mutex::new((Vec::new(), 0)),
        }
    }
}

/// One model call of a run, as [`EntryTimes::turn`] keeps it.
#[derive(Debug, Clone)]
pub struct Turn<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Why the model stopped, or the error that ended the call.
    pub outcome: Result<&'a str, String>,
    pub start_us: u64,
}

impl EntryTimes {
    /// Microseconds since the run started.
    pub fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Keeps `entry`, from `start_us` to now.
    pub(crate) fn done(&self, entry: Entry<'_>, start_us: u64) {
        let end_us = self.now_us();
        let mut gathered = self.entries.lock();
        let skill = match gathered.last_skill {
            Some(last) if gathered.name(last) == entry.skill => last,
            _ => gathered.keep(entry.skill),
        };
        gathered.last_skill = Some(skill);
        let name = gathered.keep(entry.name);
        gathered.entries.push(Timed {
            name,
            skill,
            kind: entry.kind,
            depth: entry.depth,
            start_us,
            end_us,
            ok: entry.ok,
        });
    }

    /// Keeps a model call the run made, ending now.
    pub fn turn(&self, turn: Turn<'_>) {
        let end_us = self.now_us();
        let mut kept = json!({
            "provider": turn.provider,
            "model": turn.model,
            "inputTokens": turn.input_tokens,
            "outputTokens": turn.output_tokens,
            "startMs": turn.start_us as f64 / 1000.0,
            "durationMs": end_us.saturating_sub(turn.start_us) as f64 / 1000.0,
        });
        match turn.outcome {
            Ok(stop) => kept["stop"] = json!(stop),
            Err(error) => kept["error"] = json!(error),
        }
        self.turns.lock().push(kept);
    }

    /// Keeps a log event of the run (the first [`MAX_LOGS`]; the rest are counted).
    pub fn log(&self, event: &Arc<Value>) {
        let mut logs = self.logs.lock();
        if logs.0.len() < MAX_LOGS {
            logs.0.push(event.clone());
        } else {
            logs.1 += 1;
        }
    }

    /// The model calls in the order they ended, and their tokens in all.
    pub fn turns_json(&self) -> Option<(Value, Value)> {
        let turns = self.turns.lock();
        if turns.is_empty() {
            return None;
        }
        let sum = |key: &str| {
            turns
                .iter()
                .map(|t| t[key].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        let tokens = json!({ "input": sum("inputTokens"), "output": sum("outputTokens") });
        Some((Value::Array(turns.clone()), tokens))
    }

    /// The log events kept and how many more were left out.
    pub fn logs_json(&self) -> Option<(Value, usize)> {
        let logs = self.logs.lock();
        if logs.0.is_empty() {
            return None;
        }
        let kept = logs.0.iter().map(|e| (**e).clone()).collect();
        Some((Value::Array(kept), logs.1))
    }

    /// The entries in the order they started (outer layers before the ones they wrap), each
    /// `{name, kind, skill, depth, startMs, durationMs, ok}` from the run's start.
    pub fn to_json(&self) -> Value {
        let gathered = self.entries.lock();
        let mut entries = gathered.entries.clone();
        entries.sort_by_key(|e| (e.start_us, e.depth));
        Value::Array(
            entries
                .iter()
                .map(|e| {
                    json!({
                        "name": gathered.name(e.name),
                        "kind": e.kind,
                        "skill": gathered.name(e.skill),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_run_is_held_once_by_the_future_that_gathers_its_timings() {
        let run = || async {
            let held = [7u8; 1024];
            std::future::ready(()).await;
            std::hint::black_box(held)[0] + u8::from(current().is_some())
        };
        let bare = std::mem::size_of_val(&run());
        let timed = timed(Some(Arc::new(EntryTimes::default())), run());
        assert!(
            std::mem::size_of_val(&timed) < bare + 64,
            "a run of {bare} bytes is held in {} bytes",
            std::mem::size_of_val(&timed)
        );
        // The timings are there while it runs.
        assert_eq!(futures::executor::block_on(timed), 8);
    }
}
