//! A process-local consumer of one queue: claims entries ahead of demand in batches (prefetch),
//! hands them out one at a time to any number of local tasks, and settles acks and nacks in one
//! statement per flush.
//!
//! Visibility stays per entry: every entry is claimed in the store before it is handed out, and
//! one that waited in the local buffer for more than a quarter of its visibility timeout is not
//! handed out but returned to the front of the queue (its claim is too old to finish in time).
//! An ack queued but not yet flushed when the process dies is lost, and its entry is delivered
//! again after its visibility timeout: at least once holds.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::events::store::{Delivery, EventStore, StoreResult, WAKE_ALL};

/// How often an idle consumer claims again without a wakeup (visibility timeouts, a store or
/// another process whose notification was lost).
const POLL: Duration = Duration::from_millis(250);
/// How long a consumer waits before claiming again after the store failed.
const RETRY: Duration = Duration::from_secs(1);

/// How a [`Consumer`] claims.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Most entries claimed and held locally before they are handed out. The buffer is topped
    /// up when it falls to half.
    pub prefetch: usize,
    /// How long a claimed entry stays invisible to other consumers.
    pub visibility: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            prefetch: 64,
            visibility: Duration::from_secs(30),
        }
    }
}

/// What a consumer asks of its store: claims, settlements and wakeups. Every event store
/// answers them; tests put a store behind one that counts.
#[async_trait]
trait Queues: Send + Sync + 'static {
    async fn claim(
        &self,
        topic: &str,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<Delivery>>;
    async fn ack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>>;
    async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>>;
    fn wakeups(&self) -> broadcast::Receiver<String>;
}

#[async_trait]
impl Queues for Arc<dyn EventStore> {
    async fn claim(
        &self,
        topic: &str,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<Delivery>> {
        EventStore::claim(&**self, topic, queue, max, visibility).await
    }

    async fn ack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
        EventStore::ack(&**self, topic, queue, receipts).await
    }

    async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
        EventStore::nack(&**self, topic, queue, receipts).await
    }

    fn wakeups(&self) -> broadcast::Receiver<String> {
        EventStore::wakeups(&**self)
    }
}

/// One queue consumed by this process; cheap to share between tasks (`Arc`).
pub struct Consumer {
    shared: Arc<Shared>,
    settler: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    store: Box<dyn Queues>,
    topic: String,
    queue: String,
    options: ConsumerOptions,
    /// Claimed entries not handed out yet, with when they were claimed.
    ready: Mutex<VecDeque<(Delivery, Instant)>>,
    /// Signalled when `ready` gained entries (or the consumer stops).
    arrived: Notify,
    /// Signalled when `ready` ran low.
    low: Notify,
    settle: Mutex<Pending>,
    /// Signalled when an ack or nack was queued.
    queued: Notify,
    /// The count of settlements queued that the store has taken (acked, nacked, or failed).
    flushed: watch::Sender<u64>,
    stop: CancellationToken,
}

#[derive(Default)]
struct Pending {
    acks: Vec<u64>,
    nacks: Vec<u64>,
    /// Settlements queued since the consumer started.
    count: u64,
}

impl Consumer {
    /// Starts consuming `queue` of `topic` (which must exist); stops with `stop` or
    /// [`Consumer::close`].
    pub fn start(
        store: Arc<dyn EventStore>,
        topic: &str,
        queue: &str,
        options: ConsumerOptions,
        stop: CancellationToken,
    ) -> Consumer {
        Self::start_on(Box::new(store), topic, queue, options, stop)
    }

    fn start_on(
        store: Box<dyn Queues>,
        topic: &str,
        queue: &str,
        options: ConsumerOptions,
        stop: CancellationToken,
    ) -> Consumer {
        let shared = Arc::new(Shared {
            store,
            topic: topic.to_string(),
            queue: queue.to_string(),
            options: ConsumerOptions {
                prefetch: options.prefetch.max(1),
                ..options
            },
            ready: Mutex::new(VecDeque::new()),
            arrived: Notify::new(),
            low: Notify::new(),
            settle: Mutex::new(Pending::default()),
            queued: Notify::new(),
            flushed: watch::channel(0).0,
            stop,
        });
        let claimer = tokio::spawn(shared.clone().claim_loop());
        let settler = tokio::spawn(shared.clone().settle_loop(claimer));
        Consumer {
            shared,
            settler: Mutex::new(Some(settler)),
        }
    }

    /// The next entry, waiting for one; `None` once the consumer stopped.
    pub async fn next(&self) -> Option<Delivery> {
        let shared = &self.shared;
        loop {
            let arrived = shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if shared.stop.is_cancelled() {
                return None;
            }
            if let Some(delivery) = shared.take() {
                return Some(delivery);
            }
            tokio::select! {
                () = arrived => {}
                () = shared.stop.cancelled() => return None,
            }
        }
    }

    /// Queues an ack (the entry is removed at the next flush).
    pub fn ack(&self, receipt: u64) {
        self.shared.queue_settlement(&[receipt], false);
    }

    /// Queues a nack (the entry goes back to the front of the queue at the next flush).
    pub fn nack(&self, receipt: u64) {
        self.shared.queue_settlement(&[receipt], true);
    }

    /// Waits until every ack and nack queued so far reached the store.
    pub async fn flush(&self) {
        let target = self.shared.settle.lock().count;
        let mut flushed = self.shared.flushed.subscribe();
        let _ = flushed.wait_for(|done| *done >= target).await;
    }

    /// Stops claiming, returns what is still buffered to the front of the queue, and flushes
    /// every queued ack and nack.
    pub async fn close(&self) {
        self.shared.stop.cancel();
        let settler = self.settler.lock().take();
        if let Some(settler) = settler {
            let _ = settler.await;
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // The tasks see this, return the buffered entries and flush on their own.
        self.shared.stop.cancel();
    }
}

impl Shared {
    /// A buffered entry whose claim is still fresh; stale ones are nacked on the way.
    fn take(&self) -> Option<Delivery> {
        let fresh_for = self.options.visibility / 4;
        let mut ready = self.ready.lock();
        let mut stale = Vec::new();
        let mut found = None;
        while let Some((delivery, claimed)) = ready.pop_front() {
            if claimed.elapsed() <= fresh_for {
                found = Some(delivery);
                break;
            }
            stale.push(delivery.receipt);
        }
        let low = ready.len() <= self.options.prefetch / 2;
        drop(ready);
        if !stale.is_empty() {
            self.queue_settlement(&stale, true);
        }
        if low {
            self.low.notify_one();
        }
        found
    }

    /// Queues settlements for the next flush; nacks queued together keep their order at the
    /// front of the queue.
    fn queue_settlement(&self, receipts: &[u64], nack: bool) {
        {
            let mut pending = self.settle.lock();
            if nack {
                pending.nacks.extend_from_slice(receipts);
            } else {
                pending.acks.extend_from_slice(receipts);
            }
            pending.count += receipts.len() as u64;
        }
        self.queued.notify_one();
    }

    /// Tops the local buffer up whenever it runs low and the store has entries.
    async fn claim_loop(self: Arc<Self>) {
        let mut wakeups = self.store.wakeups();
        let prefetch = self.options.prefetch;
        while !self.stop.is_cancelled() {
            let held = self.ready.lock().len();
            if held > prefetch / 2 {
                let low = self.low.notified();
                tokio::pin!(low);
                low.as_mut().enable();
                if self.ready.lock().len() > prefetch / 2 {
                    tokio::select! {
                        () = low => {}
                        () = self.stop.cancelled() => break,
                    }
                }
                continue;
            }
            // Every wakeup received so far announces a commit made before now, which the claim
            // about to run sees: answering each with a claim of its own would find nothing.
            forget_announced(&mut wakeups);
            let want = prefetch - held;
            let claimed = self
                .store
                .claim(&self.topic, &self.queue, want, self.options.visibility)
                .await;
            match claimed {
                Ok(batch) if !batch.is_empty() => {
                    let now = Instant::now();
                    let n = batch.len();
                    self.ready
                        .lock()
                        .extend(batch.into_iter().map(|delivery| (delivery, now)));
                    // One waiter per entry, not every waiter for every batch.
                    for _ in 0..n {
                        self.arrived.notify_one();
                    }
                    // Fewer than asked: the queue had no more, and what arrives next announces
                    // itself. Claiming again at once would only find it empty.
                    if n < want {
                        self.idle(&mut wakeups).await;
                    }
                }
                Ok(_) => self.idle(&mut wakeups).await,
                Err(err) => {
                    tracing::warn!(error = %err, topic = %self.topic, queue = %self.queue, "a consumer cannot claim; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(RETRY) => {}
                        () = self.stop.cancelled() => {}
                    }
                }
            }
        }
        // Stopped: what was claimed and not handed out goes back to the front at once.
        let left: Vec<u64> = self
            .ready
            .lock()
            .drain(..)
            .map(|(delivery, _)| delivery.receipt)
            .collect();
        if !left.is_empty() {
            self.queue_settlement(&left, true);
        }
        self.arrived.notify_waiters();
    }

    /// Waits for a wakeup for this topic, the poll interval, or the stop.
    async fn idle(&self, wakeups: &mut broadcast::Receiver<String>) {
        let nap = tokio::time::sleep(POLL);
        tokio::pin!(nap);
        loop {
            tokio::select! {
                () = &mut nap => return,
                () = self.stop.cancelled() => return,
                woke = wakeups.recv() => match woke {
                    Ok(topic) if topic == self.topic || topic == WAKE_ALL => return,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => return,
                    Err(RecvError::Closed) => {
                        (&mut nap).await;
                        return;
                    }
                },
            }
        }
    }

    /// Sends queued acks and nacks to the store, one statement each per flush; after the stop,
    /// waits for the claimer to return its buffer, flushes the rest and ends.
    async fn settle_loop(self: Arc<Self>, claimer: JoinHandle<()>) {
        let mut claimer = Some(claimer);
        loop {
            let queued = self.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            let (acks, nacks, count) = {
                let mut pending = self.settle.lock();
                (
                    std::mem::take(&mut pending.acks),
                    std::mem::take(&mut pending.nacks),
                    pending.count,
                )
            };
            if acks.is_empty() && nacks.is_empty() {
                self.flushed.send_replace(count);
                if self.stop.is_cancelled() {
                    match claimer.take() {
                        // The claimer may still be returning its buffer: flush that too.
                        Some(claimer) => {
                            let _ = claimer.await;
                            continue;
                        }
                        None => return,
                    }
                }
                tokio::select! {
                    () = queued => {}
                    () = self.stop.cancelled() => {}
                }
                continue;
            }
            if !acks.is_empty()
                && let Err(err) = self.store.ack(&self.topic, &self.queue, &acks).await
            {
                tracing::warn!(error = %err, topic = %self.topic, "acks failed; their entries come back after the visibility timeout");
            }
            if !nacks.is_empty()
                && let Err(err) = self.store.nack(&self.topic, &self.queue, &nacks).await
            {
                tracing::warn!(error = %err, topic = %self.topic, "nacks failed; their entries come back after the visibility timeout");
            }
            self.flushed.send_replace(count);
        }
    }
}

/// Drops the wakeups `wakeups` has received and not read.
fn forget_announced(wakeups: &mut broadcast::Receiver<String>) {
    loop {
        match wakeups.try_recv() {
            Ok(_) | Err(TryRecvError::Lagged(_)) => {}
            Err(TryRecvError::Empty | TryRecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The claim loop's rules, counted on the memory store under tokio's paused clock: there a
    //! test's sleep, shorter than the poll, returns only once every task waits, so the claims
    //! counted are every claim the loop made.

    use super::*;
    use crate::events::memory::MemoryStore;
    use crate::events::{Event, Limits};

    /// The memory store, with the size of every claim's answer noted.
    struct Counting {
        store: Arc<dyn EventStore>,
        answers: Arc<Mutex<Vec<usize>>>,
    }

    #[async_trait]
    impl Queues for Counting {
        async fn claim(
            &self,
            topic: &str,
            queue: &str,
            max: usize,
            visibility: Duration,
        ) -> StoreResult<Vec<Delivery>> {
            let got = self.store.claim(topic, queue, max, visibility).await?;
            self.answers.lock().push(got.len());
            Ok(got)
        }

        async fn ack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
            self.store.ack(topic, queue, receipts).await
        }

        async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
            self.store.nack(topic, queue, receipts).await
        }

        fn wakeups(&self) -> broadcast::Receiver<String> {
            self.store.wakeups()
        }
    }

    /// A store with queue `q` on topic `t`, and a consumer of it claiming `prefetch` ahead;
    /// with the answers of its claims.
    async fn counted(prefetch: usize) -> (Arc<dyn EventStore>, Consumer, Arc<Mutex<Vec<usize>>>) {
        let store: Arc<dyn EventStore> = Arc::new(MemoryStore::new(Limits::default()));
        store.create_queue("t", "q", false).await.unwrap();
        let answers = Arc::new(Mutex::new(Vec::new()));
        let counting = Counting {
            store: store.clone(),
            answers: answers.clone(),
        };
        let options = ConsumerOptions {
            prefetch,
            visibility: Duration::from_secs(3600),
        };
        let consumer = Consumer::start_on(
            Box::new(counting),
            "t",
            "q",
            options,
            CancellationToken::new(),
        );
        (store, consumer, answers)
    }

    /// Until every task waits (well within the poll).
    async fn settle() {
        tokio::time::sleep(POLL / 10).await;
    }

    /// Event `n` of topic `t`.
    fn numbered(n: u64) -> Event {
        let mut event = Event::new("t", "test");
        event.data = Some(serde_json::json!({ "n": n }));
        event
    }

    async fn emit(store: &Arc<dyn EventStore>, n: u64) {
        store.emit(&numbered(n)).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn wakeups_received_before_a_claim_cause_no_claim_of_their_own() {
        let (store, consumer, answers) = counted(4).await;
        for n in 0..4 {
            emit(&store, n).await;
        }
        settle().await;
        // The buffer is full: the loop waits for it to run low and reads no wakeup meanwhile.
        for n in 4..14 {
            emit(&store, n).await;
        }
        for _ in 0..14 {
            let delivery = consumer.next().await.expect("an entry");
            consumer.ack(delivery.receipt);
            settle().await;
        }
        let answers = answers.lock().clone();
        assert_eq!(
            answers.iter().sum::<usize>(),
            14,
            "every entry claimed once: {answers:?}"
        );
        assert!(
            answers.iter().filter(|n| **n == 0).count() <= 1,
            "the ten wakeups that came while the buffer was full were answered by the claims \
             that followed them, not by an empty claim each: {answers:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_that_returns_fewer_than_asked_is_the_last_until_a_wakeup() {
        let (store, consumer, answers) = counted(64).await;
        settle().await;
        assert_eq!(
            *answers.lock(),
            [0],
            "the first claim found the queue empty"
        );
        let batch: Vec<Event> = (0..3).map(numbered).collect();
        store.emit_many(&batch).await.unwrap();
        settle().await;
        assert_eq!(
            *answers.lock(),
            [0, 3],
            "the claim that took the three (of 64 asked) left the queue empty: no claim after it"
        );
        for _ in 0..3 {
            consumer.next().await.expect("an entry");
        }
        emit(&store, 3).await;
        settle().await;
        assert_eq!(
            *answers.lock(),
            [0, 3, 1],
            "the next entry's wakeup brought one claim"
        );
    }
}
