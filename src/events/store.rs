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

/// What [`EventStore::claim_key`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyClaim {
    /// The key was free: the caller holds it now, and does the work once.
    Won,
    /// Someone holds it: the request they claimed it for (`fingerprint`), and what they answered,
    /// once they did.
    Held {
        fingerprint: String,
        response: Option<String>,
    },
}

/// Wildcard wakeup: every waiter re-reads (sent after a reconnect, when notifications may
/// have been lost).
pub const WAKE_ALL: &str = "*";

#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Stores `event` in its topic's buffer and every queue of the topic. Committed (durable for
    /// the durable stores) when this returns.
    async fn emit(&self, event: &Event) -> StoreResult<()>;

    /// Creates queue `queue` on `topic` if missing (idempotent); with `replay`, a new queue
    /// starts with the topic's buffered events. Returns whether it was created.
    async fn create_queue(&self, topic: &str, queue: &str, replay: bool) -> StoreResult<bool>;

    /// Deletes a queue and its entries. Returns whether it existed.
    async fn drop_queue(&self, topic: &str, queue: &str) -> StoreResult<bool>;

    /// Names of the queues of `topic`.
    async fn queues(&self, topic: &str) -> StoreResult<Vec<String>>;

    /// Claims up to `max` visible entries in queue order, each invisible for `visibility`.
    /// Entries already delivered `limits.delivery_limit` times move to `<topic>.dead` instead.
    async fn claim(
        &self,
        topic: &str,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<Delivery>>;

    /// Removes entries for good. Returns the ids that were not in the queue.
    async fn ack(&self, topic: &str, queue: &str, ids: &[String]) -> StoreResult<Vec<String>>;

    /// Makes entries visible again at the front of the queue (first id first). Returns the ids
    /// that were not in the queue.
    async fn nack(&self, topic: &str, queue: &str, ids: &[String]) -> StoreResult<Vec<String>>;

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

    /// Claims `key` for `ttl` if nobody holds it (an expired claim is free again): one caller
    /// wins across every process on the store. `fingerprint` tells the request it was claimed
    /// for from another one with the same key.
    async fn claim_key(&self, key: &str, fingerprint: &str, ttl: Duration)
    -> StoreResult<KeyClaim>;

    /// Records what the holder of `key` answered and keeps the claim for `ttl` from now.
    async fn settle_key(&self, key: &str, response: &str, ttl: Duration) -> StoreResult<()>;

    /// Gives a claim up (the work was not done: the next caller may claim it).
    async fn release_key(&self, key: &str) -> StoreResult<()>;

    /// Live wakeups: the topic of every new or returned entry (`WAKE_ALL` after a reconnect).
    fn wakeups(&self) -> broadcast::Receiver<String>;

    /// Applies schema migrations (no-op for memory).
    async fn migrate(&self) -> StoreResult<()>;

    /// Checks the store answers (a round trip for a database), for readiness probes.
    async fn ping(&self) -> StoreResult<()>;
}
