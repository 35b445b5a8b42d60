//! What the runs record gathers of a run while it is awaited inside [`timed`]: the timings of
//! its chain entries (the onion: each middleware, body and `fn` entry of the root skill and of
//! every skill it invokes on the run's task, with its depth), its model calls (provider, model,
//! tokens, time) and its log events.

use futures::future::Either;
use quanta::{Clock, Instant};
use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::json_text as text;

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

/// Where an entry's span starts, if this task gathers timings: a reading of the run's clock
/// (the timings borrowed, not counted as one more reference: this runs on every entry).
pub(crate) fn entry_start() -> Option<u64> {
    TIMES.try_with(|times| times.clock.raw()).ok()
}

/// Keeps an entry that started at `start` (from [`entry_start`]) and ends now, in the timings
/// this task gathers.
pub(crate) fn entry_done(entry: Entry<'_>, start: u64) {
    let _ = TIMES.try_with(|times| times.done(entry, start));
}

/// The clock entries are timed by. Its raw readings (the CPU's counter where it is steady)
/// are what an entry keeps; they become microseconds only for the runs whose entries are
/// written, where reading the time as an [`Instant`] turns every reading into nanoseconds.
fn clock() -> &'static Clock {
    static CLOCK: OnceLock<Clock> = OnceLock::new();
    CLOCK.get_or_init(Clock::new)
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

/// One entry's span, from and to raw readings of the run's clock. Its names are ranges of
/// [`Gathered::text`]: copying a few bytes costs a run less than counting references to names
/// every run on every core shares.
#[derive(Debug, Clone, Copy)]
struct Timed {
    name: (u32, u32),
    skill: (u32, u32),
    kind: &'static str,
    depth: u32,
    start: u64,
    end: u64,
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
    clock: &'static Clock,
    /// A raw reading of `clock` ([`Clock::raw`]), and how long after the run started it was
    /// taken (nanoseconds).
    base: u64,
    base_ns: u64,
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
        let clock = clock();
        let base = clock.raw();
        let mut times = EntryTimes {
            clock,
            base,
            base_ns: 0,
            // A small run's chain (its layers and body) fits without growing.
            entries: Mutex::new(Gathered {
                entries: Vec::with_capacity(8),
                text: String::with_capacity(128),
                last_skill: None,
            }),
            turns: Mutex::new(Vec::new()),
            logs: Mutex::new((Vec::new(), 0)),
        };
        times.base_ns = times.since_start(started);
        times
    }
}

/// Finished runs' timings a thread keeps to use again, at most.
const SPARE: usize = 32;
/// Timings whose entries grew past these are not kept to be used again.
const SPARE_ENTRIES: usize = 64;
const SPARE_TEXT: usize = 4096;

thread_local! {
    /// Timings of runs this thread finished writing, emptied, for its next runs: a recorded
    /// run then allocates none of its own (three allocations and their frees a run fewer).
    static SPARES: RefCell<Vec<Arc<EntryTimes>>> = const { RefCell::new(Vec::new()) };
}

impl EntryTimes {
    /// The timings of a run that started at `started`: ones a finished run gave back on this
    /// thread ([`EntryTimes::give_back`]), else new ones.
    pub fn start(started: Instant) -> Arc<EntryTimes> {
        let spare = SPARES
            .try_with(|spares| spares.borrow_mut().pop())
            .ok()
            .flatten();
        if let Some(mut times) = spare
            && let Some(emptied) = Arc::get_mut(&mut times)
        {
            emptied.base = emptied.clock.raw();
            emptied.base_ns = emptied.since_start(started);
            return times;
        }
        Arc::new(EntryTimes::since(started))
    }

    /// Gives `times` back to be used again by a run this thread starts, emptied, once its run
    /// is written; let go instead while something else still holds them, or when they grew
    /// large.
    pub fn give_back(mut times: Arc<EntryTimes>) {
        let Some(held) = Arc::get_mut(&mut times) else {
            return;
        };
        let gathered = held.entries.get_mut();
        if gathered.entries.capacity() > SPARE_ENTRIES || gathered.text.capacity() > SPARE_TEXT {
            return;
        }
        gathered.entries.clear();
        gathered.text.clear();
        gathered.last_skill = None;
        held.turns.get_mut().clear();
        let logs = held.logs.get_mut();
        logs.0.clear();
        logs.1 = 0;
        let _ = SPARES.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < SPARE {
                spares.push(times);
            }
        });
    }

    /// Nanoseconds from `started` to this timings' base reading.
    fn since_start(&self, started: Instant) -> u64 {
        self.clock
            .scaled(self.base)
            .saturating_duration_since(started)
            .as_nanos() as u64
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
        self.us(self.clock.raw())
    }

    /// Microseconds from the run's start to the raw reading `raw` of its clock.
    fn us(&self, raw: u64) -> u64 {
        (self.base_ns + self.clock.delta_as_nanos(self.base, raw)) / 1000
    }

    /// Keeps `entry`, from the raw reading `start` to now.
    pub(crate) fn done(&self, entry: Entry<'_>, start: u64) {
        let end = self.clock.raw();
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
            start,
            end,
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

    /// Appends the entries to `out` as a JSON array, in the order they started (outer layers
    /// before the ones they wrap), each `{name, kind, skill, depth, startMs, durationMs, ok}`
    /// from the run's start. Written as text rather than built as a `Value`: a sampled run
    /// keeps a dozen entries, each a map of seven keys that would be made, written and freed.
    pub fn write_json(&self, out: &mut String) {
        let gathered = self.entries.lock();
        let mut order: Vec<&Timed> = gathered.entries.iter().collect();
        order.sort_by_key(|e| (e.start, e.depth));
        out.push('[');
        for (n, e) in order.into_iter().enumerate() {
            let (start_us, end_us) = (self.us(e.start), self.us(e.end));
            out.push_str(if n == 0 { "{\"name\":" } else { ",{\"name\":" });
            text::push_str(out, gathered.name(e.name));
            out.push_str(",\"kind\":");
            text::push_str(out, e.kind);
            out.push_str(",\"skill\":");
            text::push_str(out, gathered.name(e.skill));
            out.push_str(",\"depth\":");
            text::push_int(out, e.depth);
            out.push_str(",\"startMs\":");
            text::push_ms(out, start_us);
            out.push_str(",\"durationMs\":");
            text::push_ms(out, end_us.saturating_sub(start_us));
            out.push_str(if e.ok {
                ",\"ok\":true}"
            } else {
                ",\"ok\":false}"
            });
        }
        out.push(']');
    }

    /// The entries as [`EntryTimes::write_json`] writes them, read back (for tests: a run's
    /// record takes the text).
    #[cfg(test)]
    fn to_json(&self) -> Value {
        let mut out = String::new();
        self.write_json(&mut out);
        serde_json::from_str(&out).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry of a skill's body layer, as a chain keeps it.
    const EXECUTE: Entry<'static> = Entry {
        name: "execute",
        kind: "middleware",
        skill: "hello",
        depth: 1,
        ok: true,
    };

    #[test]
    fn an_entry_is_kept_in_milliseconds_from_the_runs_start_to_where_it_began_and_for_how_long() {
        let started = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(5));
        // Made a little after the run began, as a recorded run's are.
        let times = EntryTimes::since(started);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let start = times.clock.raw();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let entry = EXECUTE;
        times.done(entry, start);
        let kept = times.to_json();
        let kept = &kept[0];
        assert_eq!(
            (&kept["name"], &kept["skill"], &kept["ok"]),
            (&json!("execute"), &json!("hello"), &json!(true))
        );
        // At least the sleeps before and within it, and in milliseconds, not some other unit.
        let start_ms = kept["startMs"].as_f64().unwrap();
        let duration_ms = kept["durationMs"].as_f64().unwrap();
        assert!((25.0..10_000.0).contains(&start_ms), "{kept}");
        assert!((30.0..10_000.0).contains(&duration_ms), "{kept}");
        assert!(times.now_us() >= 55_000, "{}", times.now_us());
    }

    #[test]
    fn timings_given_back_serve_the_threads_next_run_emptied_and_timed_from_its_start() {
        let entry = EXECUTE;
        let first = EntryTimes::start(Instant::now());
        first.done(entry, first.clock.raw());
        first.log(&Arc::new(json!({ "message": "hi" })));
        let memory = Arc::as_ptr(&first);
        EntryTimes::give_back(first);
        std::thread::sleep(std::time::Duration::from_millis(30));
        // The next run started 100 ms ago.
        let started = Instant::now()
            .checked_sub(std::time::Duration::from_millis(100))
            .unwrap();
        let next = EntryTimes::start(started);
        assert_eq!(Arc::as_ptr(&next), memory, "the same timings, used again");
        assert_eq!(next.to_json(), json!([]));
        assert!(next.logs_json().is_none());
        next.done(entry, next.clock.raw());
        let start_ms = next.to_json()[0]["startMs"].as_f64().unwrap();
        assert!((100.0..10_000.0).contains(&start_ms), "{start_ms}");
    }

    #[test]
    fn timings_something_else_still_holds_are_not_used_again() {
        let times = EntryTimes::start(Instant::now());
        let held = times.clone();
        EntryTimes::give_back(times);
        let next = EntryTimes::start(Instant::now());
        assert_ne!(Arc::as_ptr(&next), Arc::as_ptr(&held));
    }

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
