//! The [`Recorder`]: takes finished runs from the doors without waiting, each redacted and
//! turned into its row on the thread that ended it, into a buffer of that thread's (bounded
//! together in runs and bytes; when they are full or the store is down the run is dropped and
//! counted, and the request goes on), writes them to the store in batches on a task of its
//! own, and prunes the record by age and count.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use std::sync::OnceLock;
use tokio::sync::{Notify, broadcast};

use crate::context::id::{iso, now_ms};
use crate::events::runs::pending::Pending;
use crate::events::runs::record::RunRecord;
use crate::events::runs::view::summary;
use crate::events::store::EventStore;

/// Runs waiting to be written; past it they are dropped (and counted).
const QUEUE: u64 = 8192;
/// Bytes the rows of the runs waiting to be written hold at most (each payload past the
/// record's cut is cut before it waits); past it a run is dropped (and counted), so a flood of
/// large invocations cannot hold memory through the record once they have ended.
const QUEUE_BYTES: u64 = 8 * 1024 * 1024;
/// Buffers runs wait in; a thread appends to one of its own unless more threads record than
/// there are buffers.
const SHARDS: usize = 16;
/// Runs written in one transaction at most.
const BATCH: usize = 4096;
/// How long the writer gathers runs after the first of a batch: a few larger transactions cost
/// the store far less than one a run (the record may lag this much behind the runs).
const LINGER: Duration = Duration::from_millis(50);
/// How often the record is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Runs the feed holds for a listener that has not read them; one that falls further behind
/// is told how many it missed.
const FEED: usize = 1024;
/// At most one warning this often about runs that could not be written.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What is recorded and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordConfig {
    /// Runs older than this are pruned.
    pub retention: Duration,
    /// At most this many runs are kept (the newest).
    pub keep: usize,
    /// Args and results longer than this (bytes of JSON) are cut.
    pub max_bytes: usize,
    /// The share of runs that ended well and quickly whose entries' timings are kept too (those
    /// of the others always are), from 0 to 1.
    pub detail_sample: f64,
    /// How long after it started a run may be retried (`POST /runs/{id}/retry`).
    pub retry_window: Duration,
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig {
            retention: Duration::from_secs(7 * 24 * 3600),
            keep: 100_000,
            max_bytes: 16 * 1024,
            detail_sample: 0.01,
            retry_window: Duration::from_secs(24 * 3600),
        }
    }
}

/// What the recorder and its writer share.
struct Shared {
    /// `None`: runs are not recorded.
    config: RwLock<Option<RecordConfig>>,
    /// What every run reads of the config, without a lock every core takes: whether runs are
    /// recorded, and the detail sample (in [`WHOLE`]ths of a run).
    on: AtomicBool,
    sample: AtomicU64,
    /// Args and results longer than this are cut, before they wait or as they are written
    /// ([`RecordConfig::max_bytes`]).
    max_bytes: AtomicUsize,
    /// The runs waiting to be written, in a buffer per thread.
    shards: Box<[Shard]>,
    /// What the waiting runs hold of the bounds, kept off the cache line of what every run reads.
    taking: Taking,
    /// Wakes the writer: runs are waiting, or the recorder is gone ([`Shared::closed`]).
    wake: Notify,
    /// Ends the writer's linger: a batch is waiting.
    full: Notify,
    closed: AtomicBool,
    written: AtomicU64,
    dropped: AtomicU64,
    /// Listeners of the feed, read on every run (the feed's own count takes a lock).
    listeners: AtomicUsize,
    /// Woken each time a batch is written or dropped.
    settled: Notify,
    /// Runs as they start and once written (`GET /runs/stream`), for whoever listens.
    feed: broadcast::Sender<Arc<Value>>,
}

/// What the runs waiting to be written hold in all, as the buffers reserved it ([`Buffer`]),
/// on a cache line of its own: the buffers move it once every [`CREDIT_RUNS`] runs or so, and
/// the settings beside it, which every run reads, stay in every core's cache.
#[repr(align(128))]
#[derive(Default)]
struct Taking {
    /// Runs and bytes of their rows: those waiting, and what the buffers reserved for their
    /// next runs.
    queued: AtomicU64,
    queued_bytes: AtomicU64,
    /// Whether the writer was woken for runs it has not yet taken.
    woken: AtomicBool,
}

/// What a buffer reserves of [`QUEUE`] and [`QUEUE_BYTES`] at a time, for its next runs: a
/// run then moves no count every core shares. The runs waiting can then fall short of the
/// bounds by what the other buffers hold reserved, at most `SHARDS` times this.
const CREDIT_RUNS: u64 = 64;
const CREDIT_BYTES: u64 = 64 * 1024;

/// One buffer of runs waiting to be written, on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<Buffer>);

/// A buffer's runs waiting to be written, and what it may still add of the bounds it
/// reserved.
#[derive(Default)]
struct Buffer {
    pending: Pending,
    runs_left: u64,
    bytes_left: u64,
    /// Runs this buffer has taken so far, dropped ones too.
    taken: u64,
}

impl Buffer {
    /// Reserves room for one more run of `bytes`: from what the buffer holds, else from the
    /// bounds (a credit's worth, or only this run's when less is left); false when the bounds
    /// are full. Wakes `full` when the runs reserved in all reach another batch.
    fn reserve(&mut self, taking: &Taking, bytes: u64, full: &Notify) -> bool {
        if self.runs_left == 0 || self.bytes_left < bytes {
            let (runs, bytes_wanted) = (
                CREDIT_RUNS.saturating_sub(self.runs_left),
                CREDIT_BYTES.max(bytes).saturating_sub(self.bytes_left),
            );
            if !self.take_credit(taking, runs, bytes_wanted, full)
                && !self.take_credit(
                    taking,
                    u64::from(self.runs_left == 0),
                    bytes.saturating_sub(self.bytes_left),
                    full,
                )
            {
                return false;
            }
        }
        self.runs_left -= 1;
        self.bytes_left -= bytes;
        true
    }

    /// Takes `runs` and `bytes` more of the bounds, if they hold them.
    fn take_credit(&mut self, taking: &Taking, runs: u64, bytes: u64, full: &Notify) -> bool {
        let before = taking.queued.fetch_add(runs, Ordering::Relaxed);
        let before_bytes = taking.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        if before + runs > QUEUE || before_bytes + bytes > QUEUE_BYTES {
            taking.queued.fetch_sub(runs, Ordering::Relaxed);
            taking.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        self.runs_left += runs;
        self.bytes_left += bytes;
        if (before + runs) / BATCH as u64 > before / BATCH as u64 {
            full.notify_one();
        }
        true
    }
}

/// Records finished runs into a store; off until [`Recorder::configure`] turns it on.
pub struct Recorder {
    store: Arc<dyn EventStore>,
    shared: Arc<Shared>,
    /// Set once the writer's task is started (on the runtime of the first run).
    writer: OnceLock<()>,
}

impl Recorder {
    pub fn new(store: Arc<dyn EventStore>) -> Recorder {
        Recorder {
            store,
            shared: Arc::new(Shared {
                config: RwLock::new(None),
                on: AtomicBool::new(false),
                sample: AtomicU64::new(0),
                max_bytes: AtomicUsize::new(RecordConfig::default().max_bytes),
                shards: (0..SHARDS).map(|_| Shard::default()).collect(),
                taking: Taking::default(),
                wake: Notify::new(),
                full: Notify::new(),
                closed: AtomicBool::new(false),
                written: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                listeners: AtomicUsize::new(0),
                settled: Notify::new(),
                feed: broadcast::channel(FEED).0,
            }),
            writer: OnceLock::new(),
        }
    }

    /// Records runs with `config` from now on; `None` stops recording.
    pub fn configure(&self, config: Option<RecordConfig>) {
        let mut current = self.shared.config.write();
        *current = config;
        let sample = config.map_or(0.0, |c| c.detail_sample);
        self.shared
            .sample
            .store(share_of_whole(sample), Ordering::Relaxed);
        if let Some(config) = config {
            self.shared
                .max_bytes
                .store(config.max_bytes, Ordering::Relaxed);
        }
        self.shared.on.store(config.is_some(), Ordering::Release);
    }

    /// Whether runs are being recorded.
    pub fn on(&self) -> bool {
        self.shared.on.load(Ordering::Acquire)
    }

    /// How runs are recorded now; `None` while they are not.
    pub fn config(&self) -> Option<RecordConfig> {
        *self.shared.config.read()
    }

    /// Runs as they start (`"phase": "start"`) and once they are written (`"phase": "end"`,
    /// the listing's summary of the run), on this server.
    pub fn feed(&self) -> Feed {
        self.shared.listeners.fetch_add(1, Ordering::Relaxed);
        Feed {
            runs: self.shared.feed.subscribe(),
            shared: self.shared.clone(),
        }
    }

    /// Tells the feed's listeners `run` started (nothing is done while none listens).
    pub fn started(&self, run: &RunRecord) {
        if self.shared.listeners.load(Ordering::Relaxed) == 0 {
            return;
        }
        let _ = self.shared.feed.send(Arc::new(json!({
            "phase": "start",
            "id": run.id,
            "door": run.door,
            "principal": run.principal,
            "skill": run.skill,
            "started": iso(run.started_ms()),
            "parent": run.parent,
        })));
    }

    /// Takes `run` to be written, without waiting: dropped (and counted) when the runs
    /// waiting are too many, and ignored when recording is off.
    pub fn record(&self, mut run: Box<RunRecord>) {
        if !self.on() {
            return;
        }
        if sampled(self.shared.sample.load(Ordering::Relaxed)) {
            run.keep_entries();
        }
        if !self.writer_started() {
            return;
        }
        let shared = &self.shared;
        let max_bytes = shared.max_bytes.load(Ordering::Relaxed);
        let mut buffer = shared.shards[shard()].0.lock();
        buffer.taken += 1;
        let mark = buffer.pending.mark();
        run.write_to(&mut buffer.pending, max_bytes);
        let bytes = buffer.pending.bytes_since(mark);
        if !buffer.reserve(&shared.taking, bytes, &shared.full) {
            buffer.pending.undo(mark);
            drop(buffer);
            self.dropped(1);
            return;
        }
        drop(buffer);
        if !shared.taking.woken.load(Ordering::Relaxed)
            && !shared.taking.woken.swap(true, Ordering::AcqRel)
        {
            shared.wake.notify_one();
        }
    }

    /// Whether the writer's task runs (started now if it was not: on the runtime the store
    /// names, else on the current one).
    fn writer_started(&self) -> bool {
        if self.writer.get().is_some() {
            return true;
        }
        // Where the store writes batches best (the SQLite store: on its own writer thread,
        // off the doors' threads), else where this run ends.
        let Some(runtime) = self
            .store
            .runs_runtime()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        else {
            return false;
        };
        self.writer.get_or_init(|| {
            runtime.spawn(write(self.store.clone(), self.shared.clone()));
        });
        true
    }

    fn dropped(&self, n: u64) {
        self.shared.dropped.fetch_add(n, Ordering::Relaxed);
        self.shared.settled.notify_waiters();
    }

    /// Runs dropped so far (queue full, or the store refused them).
    pub fn dropped_total(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Runs written so far.
    pub fn written_total(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Waits until at least `n` runs have been written (or dropped) in all.
    pub async fn settled_at_least(&self, n: u64) {
        loop {
            let woken = self.shared.settled.notified();
            if self.written_total() + self.dropped_total() >= n {
                return;
            }
            woken.await;
        }
    }

    /// Waits until every run taken so far is written or dropped.
    pub async fn settled(&self) {
        let taken = self.shared.shards.iter().map(|s| s.0.lock().taken).sum();
        self.settled_at_least(taken).await;
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // The writer writes what is waiting and ends.
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

/// The buffer this thread appends its runs to.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|shard| {
        if let Some(index) = shard.get() {
            return index;
        }
        let index = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
        shard.set(Some(index));
        index
    })
}

thread_local! {
    /// This thread's buffer of runs, once it recorded one.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
    /// The shares of a run this thread's runs have added up to since the last one sampled, for
    /// the sample of entries' timings: kept per thread, so no count is shared by every core on
    /// every run.
    static SHARES: Cell<u64> = const { Cell::new(0) };
}

/// One run, in the shares [`sampled`] adds up.
const WHOLE: u64 = 1 << 32;

/// `share` (from 0 to 1) of a run, in [`WHOLE`]ths.
fn share_of_whole(share: f64) -> u64 {
    (share.clamp(0.0, 1.0) * WHOLE as f64).round() as u64
}

/// Whether the run taken now is in the share `sample` ([`share_of_whole`]) whose entries are
/// kept: each run adds its share, and the run whose shares reach a whole is sampled, evenly
/// spread over each thread's runs. In integers: a float's `floor` is a call on the baseline
/// x86-64 target, and this runs for every run.
fn sampled(sample: u64) -> bool {
    SHARES.with(|shares| {
        let sum = shares.get() + sample;
        let whole = sum >= WHOLE;
        shares.set(if whole { sum - WHOLE } else { sum });
        whole
    })
}

/// A listener of the runs feed ([`Recorder::feed`]).
pub struct Feed {
    runs: broadcast::Receiver<Arc<Value>>,
    shared: Arc<Shared>,
}

impl Feed {
    /// The next run started or written, or how many this listener missed.
    pub async fn recv(&mut self) -> Result<Arc<Value>, broadcast::error::RecvError> {
        self.runs.recv().await
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.shared.listeners.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The writer: the runs waiting, taken from every buffer a [`LINGER`] after the first of them
/// came (or as soon as a batch is waiting) and written in batches, and the record pruned every
/// [`PRUNE_EVERY`], until the recorder is dropped. It sleeps through the linger rather than
/// waking for each run that arrives: on a busy server that is a wake-up a request saved.
async fn write(store: Arc<dyn EventStore>, shared: Arc<Shared>) {
    // Swapped with the buffers the doors fill, so each keeps its memory from round to round.
    let mut taken: Vec<Pending> = (0..SHARDS).map(|_| Pending::default()).collect();
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    let mut warned: Option<Instant> = None;
    loop {
        tokio::select! {
            () = shared.wake.notified() => {}
            _ = prune.tick() => {
                let Some(config) = *shared.config.read() else { continue };
                let before = now_ms() as i64 - config.retention.as_millis() as i64;
                if let Err(err) = store.prune_runs(before, config.keep).await {
                    tracing::warn!(error = %err, "the runs record could not be pruned");
                }
                continue;
            }
        }
        let closed = shared.closed.load(Ordering::Acquire);
        if !closed && shared.taking.queued.load(Ordering::Relaxed) < BATCH as u64 {
            tokio::select! {
                () = tokio::time::sleep(LINGER) => {}
                () = shared.full.notified() => {}
            }
        }
        // A run that comes after this wakes the writer again.
        shared.taking.woken.store(false, Ordering::Release);
        for (shard, taken) in shared.shards.iter().zip(&mut taken) {
            std::mem::swap(&mut shard.0.lock().pending, taken);
        }
        let (runs, bytes) = taken
            .iter()
            .fold((0, 0), |(n, b), p| (n + p.len() as u64, b + p.bytes()));
        let rows = Pending::take(&taken);
        for batch in rows.chunks(BATCH) {
            let n = batch.len() as u64;
            match store.put_runs(batch).await {
                Ok(()) => {
                    shared.written.fetch_add(n, Ordering::Relaxed);
                    if shared.listeners.load(Ordering::Relaxed) > 0 {
                        for row in batch {
                            let mut ended = summary(row);
                            ended["phase"] = Value::String("end".into());
                            let _ = shared.feed.send(Arc::new(ended));
                        }
                    }
                }
                Err(err) => {
                    shared.dropped.fetch_add(n, Ordering::Relaxed);
                    if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(error = %err, runs = n, "runs could not be recorded and were dropped");
                    }
                }
            }
            shared.settled.notify_waiters();
        }
        drop(rows);
        // Counted until written: the batch being written holds its rows too. What the buffers
        // reserved for their next runs stays theirs.
        shared.taking.queued.fetch_sub(runs, Ordering::Relaxed);
        shared
            .taking
            .queued_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        taken.iter_mut().for_each(Pending::clear);
        if closed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detail_sample_takes_every_run_whose_shares_reach_a_whole() {
        let picked = |share: f64, runs: usize| -> Vec<usize> {
            SHARES.with(|shares| shares.set(0));
            let sample = share_of_whole(share);
            (1..=runs).filter(|_| sampled(sample)).collect()
        };
        assert_eq!(
            picked(0.01, 300),
            [100, 200, 300],
            "1%: every hundredth run"
        );
        assert_eq!(picked(0.25, 8), [4, 8]);
        assert_eq!(picked(1.0, 3), [1, 2, 3], "all of them");
        assert!(picked(0.0, 1000).is_empty(), "none of them");
    }

    /// Runs of `bytes` each that `buffer` takes before the bounds are full.
    fn fill(buffer: &mut Buffer, taking: &Taking, bytes: u64, full: &Notify) -> u64 {
        let mut taken = 0;
        while buffer.reserve(taking, bytes, full) {
            taken += 1;
        }
        taken
    }

    #[test]
    fn buffers_reserving_by_credits_never_hold_more_than_the_bounds_together() {
        let (taking, full) = (Taking::default(), Notify::new());
        // 10 runs being written, which the buffers no longer hold.
        taking.queued.store(10, Ordering::Relaxed);
        let (mut a, mut b) = (Buffer::default(), Buffer::default());
        // `a` takes a credit's worth, then `b` fills the bounds (its last runs one by one, as
        // less than a credit is left), then `a` uses its credit.
        assert!(a.reserve(&taking, 100, &full));
        let by_b = fill(&mut b, &taking, 100, &full);
        let by_a = 1 + fill(&mut a, &taking, 100, &full);
        assert_eq!(
            by_a, CREDIT_RUNS,
            "a runs on what it reserved once the bounds are full"
        );
        assert_eq!(
            10 + by_a + by_b,
            QUEUE,
            "together they take the bounds to the run"
        );
        assert_eq!(taking.queued.load(Ordering::Relaxed), QUEUE);
    }

    #[test]
    fn a_buffer_takes_the_last_of_the_bytes_when_less_than_a_credit_is_left() {
        let (taking, full) = (Taking::default(), Notify::new());
        let mut buffer = Buffer::default();
        // Runs of 100 KiB: more than a credit each, and 8 MiB holds 81 of them and a part.
        let taken = fill(&mut buffer, &taking, 100 * 1024, &full);
        assert_eq!(taken, QUEUE_BYTES / (100 * 1024));
        assert!(taking.queued_bytes.load(Ordering::Relaxed) <= QUEUE_BYTES);
    }
}
