//! The [`Recorder`]: takes finished runs from the doors without waiting (a queue bounded in runs
//! and in the bytes of their args and results; when it is full or the store is down the run is
//! dropped and counted, and the request goes on),
//! redacts and writes them to the store in batches on a task of its own, and prunes the record
//! by age and count.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde_json::{Value, json};
use std::sync::OnceLock;
use tokio::sync::{Notify, broadcast, mpsc};

use crate::context::id::{iso, now_ms};
use crate::events::runs::record::RunRecord;
use crate::events::runs::view::summary;
use crate::events::store::EventStore;

/// Runs waiting to be written; past it they are dropped (and counted).
const QUEUE: usize = 8192;
/// Bytes of args and results the runs waiting to be written hold at most (each payload past
/// the record's cut is cut before it waits); past it a run is dropped (and counted), so a flood
/// of large invocations cannot hold memory through the record once they have ended.
const QUEUE_BYTES: u64 = 8 * 1024 * 1024;
/// Runs written in one transaction at most.
const BATCH: usize = 1024;
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
    /// recorded, and the detail sample (an `f64`'s bits).
    on: AtomicBool,
    sample: AtomicU64,
    /// Args and results longer than this are cut, before they wait or as they are written
    /// ([`RecordConfig::max_bytes`]).
    max_bytes: AtomicUsize,
    /// What the runs waiting to be written hold, in bytes of args and results.
    queued_bytes: AtomicU64,
    sent: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    /// Listeners of the feed, read on every run (the feed's own count takes a lock).
    listeners: AtomicUsize,
    /// Woken each time a batch is written or dropped.
    settled: Notify,
    /// Runs as they start and once written (`GET /runs/stream`), for whoever listens.
    feed: broadcast::Sender<Arc<Value>>,
}

/// Records finished runs into a store; off until [`Recorder::configure`] turns it on.
pub struct Recorder {
    store: Arc<dyn EventStore>,
    shared: Arc<Shared>,
    queue: OnceLock<mpsc::Sender<(RunRecord, u64)>>,
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
                queued_bytes: AtomicU64::new(0),
                sent: AtomicU64::new(0),
                written: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                listeners: AtomicUsize::new(0),
                settled: Notify::new(),
                feed: broadcast::channel(FEED).0,
            }),
            queue: OnceLock::new(),
        }
    }

    /// Records runs with `config` from now on; `None` stops recording.
    pub fn configure(&self, config: Option<RecordConfig>) {
        let mut current = self.shared.config.write();
        *current = config;
        let sample = config.map_or(0.0, |c| c.detail_sample);
        self.shared
            .sample
            .store(sample.to_bits(), Ordering::Relaxed);
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

    /// Takes `run` to be written, without waiting: dropped (and counted) when the queue is
    /// full, and ignored when recording is off.
    pub fn record(&self, mut run: RunRecord) {
        if !self.on() {
            return;
        }
        if sampled(f64::from_bits(self.shared.sample.load(Ordering::Relaxed))) {
            run.keep_entries();
        }
        let Some(queue) = self.queue() else {
            return;
        };
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        let held = run.shrink(self.shared.max_bytes.load(Ordering::Relaxed));
        let queued = self.shared.queued_bytes.fetch_add(held, Ordering::Relaxed) + held;
        if queued > QUEUE_BYTES || queue.try_send((run, held)).is_err() {
            self.shared.queued_bytes.fetch_sub(held, Ordering::Relaxed);
            self.dropped(1);
        }
    }

    /// The writer's queue, its task started on first use (on the runtime of the first run).
    fn queue(&self) -> Option<&mpsc::Sender<(RunRecord, u64)>> {
        if let Some(queue) = self.queue.get() {
            return Some(queue);
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            runtime.spawn(write(self.store.clone(), rx, self.shared.clone()));
            tx
        }))
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
        self.settled_at_least(self.shared.sent.load(Ordering::Relaxed))
            .await;
    }
}

thread_local! {
    /// Runs this thread has taken, for the sample of entries' timings: counted per thread, so
    /// no count is shared by every core on every run.
    static TAKEN: Cell<u64> = const { Cell::new(0) };
}

/// Whether the run taken now is in the share `sample` whose entries are kept: every run whose
/// share reaches a new whole, evenly spread over each thread's runs.
fn sampled(sample: f64) -> bool {
    let n = TAKEN.with(|taken| {
        let n = taken.get();
        taken.set(n + 1);
        n
    }) as f64;
    ((n + 1.0) * sample).floor() > (n * sample).floor()
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

/// The writer: batches of runs to the store as they come, and the record pruned every
/// [`PRUNE_EVERY`], until the recorder is dropped.
async fn write(
    store: Arc<dyn EventStore>,
    mut queue: mpsc::Receiver<(RunRecord, u64)>,
    shared: Arc<Shared>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    let mut warned: Option<Instant> = None;
    loop {
        tokio::select! {
            taken = queue.recv_many(&mut batch, BATCH) => {
                if taken == 0 {
                    return;
                }
                let closed = gather(&mut queue, &mut batch).await;
                let max_bytes = shared.max_bytes.load(Ordering::Relaxed);
                let mut held = 0;
                let rows: Vec<_> = batch
                    .drain(..)
                    .map(|(run, bytes)| {
                        held += bytes;
                        run.stored(max_bytes)
                    })
                    .collect();
                let n = rows.len() as u64;
                let put = store.put_runs(&rows).await;
                // Counted until written: the batch being written holds its payloads too.
                shared.queued_bytes.fetch_sub(held, Ordering::Relaxed);
                match put {
                    Ok(()) => {
                        shared.written.fetch_add(n, Ordering::Relaxed);
                        if shared.listeners.load(Ordering::Relaxed) > 0 {
                            for row in &rows {
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
                if closed {
                    return;
                }
            }
            _ = prune.tick() => {
                let Some(config) = *shared.config.read() else { continue };
                let before = now_ms() as i64 - config.retention.as_millis() as i64;
                if let Err(err) = store.prune_runs(before, config.keep).await {
                    tracing::warn!(error = %err, "the runs record could not be pruned");
                }
            }
        }
    }
}

/// Lets runs gather for [`LINGER`] unless a whole batch is already there, then adds what came
/// to `batch` (up to [`BATCH`] runs); whether the queue closed meanwhile. The writer sleeps
/// through the linger rather than waking for each run that arrives: on a busy server that is a
/// wake-up a request saved. A full batch is written at once, so the record keeps up with any
/// rate the store can write.
async fn gather(
    queue: &mut mpsc::Receiver<(RunRecord, u64)>,
    batch: &mut Vec<(RunRecord, u64)>,
) -> bool {
    if batch.len() < BATCH {
        tokio::time::sleep(LINGER).await;
    }
    while batch.len() < BATCH {
        match queue.try_recv() {
            Ok(run) => batch.push(run),
            Err(mpsc::error::TryRecvError::Empty) => return false,
            Err(mpsc::error::TryRecvError::Disconnected) => return true,
        }
    }
    false
}
