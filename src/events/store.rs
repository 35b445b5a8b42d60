//! The store trait every event store implements, and the types it speaks.
//!
//! A store keeps, per topic, a replay buffer bounded by count and age, and any number of named
//! queues (consumer groups). An emitted event goes into the buffer and into every queue of its
//! topic in one commit. Claiming a queue entry makes it invisible for a visibility timeout and
//! counts a delivery; an entry not acked in time becomes visible again at its old place; nack
//! puts it at the front; an entry claimed more than the delivery limit moves to the queue `dead`
//! of the topic `<topic>.dead`.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::events::Event;
use crate::events::records::{Claim, KeyClaim, Records};

/// A store failure: the database said no, or could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("event store: {0}")]
    Database(#[from] sqlx::Error),
    #[error("event store migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("event store: {0}")]
    Invalid(String),
    #[error("event store write failed: {0}")]
    Write(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// One queue entry handed to a consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event: Event,
    /// How many times this entry has been delivered, this delivery included.
    pub attempts: u32,
    /// The entry's identity in the store, unique among every entry of every queue and stable
    /// across redeliveries and nacks: what acks and nacks name. (Event ids are random and could
    /// in principle repeat; a receipt cannot.)
    pub receipt: u64,
}

/// How long buffers keep events and how queue entries are delivered.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Events kept per topic for replay.
    pub buffer_events: usize,
    /// Oldest event kept for replay.
    pub buffer_age: Duration,
    /// Deliveries after which an entry moves to `<topic>.dead`.
    pub delivery_limit: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            buffer_events: 1000,
            buffer_age: Duration::from_secs(24 * 3600),
            delivery_limit: 5,
        }
    }
}

/// Wildcard wakeup: every waiter re-reads (sent after a reconnect, when notifications may
/// have been lost).
pub const WAKE_ALL: &str = "*";

#[async_trait]
pub trait EventStore: Records + Send + Sync + 'static {
    /// `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Stores `event` in its topic's buffer and every queue of the topic. Committed (durable for
    /// the durable stores) when this returns.
    async fn emit(&self, event: &Event) -> StoreResult<()>;

    /// Stores several events at once, in order, committed together (one statement for the
    /// durable stores): what a producer with a batch in hand calls instead of `emit` per event.
    async fn emit_many(&self, events: &[Event]) -> StoreResult<()>;

    /// Claims `claim.key` as [`Records::claim_key`] does and, only when it is won, stores
    /// `events` in the same commit, the claim held for `claim.ttl` with `claim.answer`
    /// recorded: a door's "queue this delivery once", which no crash or dropped request can
    /// leave half done (a key held with nothing queued, or queued with no answer). A held key
    /// stores nothing and says who holds it.
    async fn emit_claimed(&self, claim: &Claim, events: &[Event]) -> StoreResult<KeyClaim>;

    /// Creates queue `queue` on `topic` if missing (idempotent); with `replay`, a new queue
    /// starts with the topic's buffered events. Returns whether it was created.
    async fn create_queue(&self, topic: &str, queue: &str, replay: bool) -> StoreResult<bool>;

    /// Deletes a queue and its entries. Returns whether it existed.
    async fn drop_queue(&self, topic: &str, queue: &str) -> StoreResult<bool>;

    /// Names of the queues of `topic`.
    async fn queues(&self, topic: &str) -> StoreResult<Vec<String>>;

    /// The topics that have a queue named `queue`, in order (every `<topic>.dead` with dead
    /// letters has `dead`).
    async fn topics_with_queue(&self, queue: &str) -> StoreResult<Vec<String>>;

    /// Claims up to `max` visible entries in queue order, each invisible for `visibility`.
    /// Entries already delivered `limits.delivery_limit` times move to `<topic>.dead` instead.
    /// Fewer than `max` means no more were claimable when it ran: a [`Consumer`] then waits for
    /// a wakeup (or its poll) before it claims again.
    ///
    /// [`Consumer`]: crate::events::Consumer
    async fn claim(
        &self,
        topic: &str,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<Delivery>>;

    /// Removes entries for good, by receipt. Returns the receipts that were not in the queue.
    async fn ack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>>;

    /// Makes entries visible again at the front of the queue (first receipt first). Returns the
    /// receipts that were not in the queue.
    async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>>;

    /// The receipts of the entries of a queue that hold these event ids, as (event id, receipt),
    /// for callers that settle by event id.
    async fn receipts(
        &self,
        topic: &str,
        queue: &str,
        ids: &[String],
    ) -> StoreResult<Vec<(String, u64)>>;

    /// Buffered events of `topic` in emit order, after event `after` if given.
    async fn buffered(
        &self,
        topic: &str,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Event>>;

    /// Entries of a queue in order, without claiming them.
    async fn peek(&self, topic: &str, queue: &str, limit: usize) -> StoreResult<Vec<Delivery>>;

    /// Appends `event` to one queue only (used to requeue dead letters).
    async fn enqueue(&self, topic: &str, queue: &str, event: &Event) -> StoreResult<()>;

    /// Live wakeups: the topic of every new or returned entry (`WAKE_ALL` after a reconnect).
    fn wakeups(&self) -> broadcast::Receiver<String>;

    /// Applies schema migrations (no-op for memory).
    async fn migrate(&self) -> StoreResult<()>;

    /// Checks the store answers (a round trip for a database), for readiness probes.
    async fn ping(&self) -> StoreResult<()>;
}

/// The distinct topics of a batch of events, in first-seen order.
pub(crate) fn distinct_topics(events: &[Event]) -> Vec<&str> {
    let mut topics: Vec<&str> = Vec::new();
    for event in events {
        if !topics.contains(&event.topic.as_str()) {
            topics.push(&event.topic);
        }
    }
    topics
}

/// The receipts, in their order, that are not among `found` (what a statement touched).
pub(crate) fn missing(receipts: &[u64], found: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let found: std::collections::HashSet<u64> = found.into_iter().collect();
    receipts
        .iter()
        .filter(|r| !found.contains(r))
        .copied()
        .collect()
}
