//! The records a store keeps beside its topics and queues: claimed keys, schedules, handler
//! subscriptions and session histories; the trait every store implements for them, and the
//! types it speaks.

use std::time::Duration;

use async_trait::async_trait;

use crate::events::store::StoreResult;

/// What [`Records::claim_key`] found.
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

/// One entry of a session's history.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionEntry {
    /// When it was written (ms since the epoch).
    pub at_ms: i64,
    /// The captured JSON, as text.
    pub entry: String,
}

/// A schedule as the store keeps it (`spec` is JSON the store does not read).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredSchedule {
    pub name: String,
    pub spec: String,
    /// When it fires next (ms since the epoch); `None` once it has run its `times`.
    pub next_ms: Option<i64>,
    /// How many firings have been taken.
    pub runs: i64,
}

/// A handler subscription as the store keeps it (`spec` is JSON the store does not read).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredSubscription {
    pub topic: String,
    /// The handler's queue.
    pub queue: String,
    pub spec: String,
}

/// Claimed keys, schedules, subscriptions and sessions: what every store keeps beside its
/// topics. The SQL stores share one implementation (`events::sql_records`).
#[async_trait]
pub trait Records: Send + Sync {
    /// Claims `key` for `ttl` if nobody holds it (an expired claim is free again): one caller
    /// wins across every process on the store. `fingerprint` tells the request it was claimed
    /// for from another one with the same key.
    async fn claim_key(&self, key: &str, fingerprint: &str, ttl: Duration)
    -> StoreResult<KeyClaim>;

    /// Records what the holder of `key` answered and keeps the claim for `ttl` from now.
    async fn settle_key(&self, key: &str, response: &str, ttl: Duration) -> StoreResult<()>;

    /// Gives a claim up (the work was not done: the next caller may claim it).
    async fn release_key(&self, key: &str) -> StoreResult<()>;

    /// Adds schedule `name`, or replaces it when its `spec` changed (the count starts again);
    /// the same spec again is left as it is, so a restart keeps its next firing. Returns
    /// whether anything was written.
    async fn put_schedule(&self, name: &str, spec: &str, next_ms: Option<i64>)
    -> StoreResult<bool>;

    /// Replaces the spec of schedule `name`, keeping its next firing and its runs. Returns
    /// whether it existed.
    async fn set_schedule_spec(&self, name: &str, spec: &str) -> StoreResult<bool>;

    /// Removes schedule `name`. Returns whether it existed.
    async fn delete_schedule(&self, name: &str) -> StoreResult<bool>;

    /// Every schedule, by name.
    async fn schedules(&self) -> StoreResult<Vec<StoredSchedule>>;

    /// Takes the firing of `name` due at `due_ms`: moves its next firing to `next_ms` (counting
    /// a run when `ran`), only if it is still due at `due_ms`. One caller wins across every
    /// process on the store; the others get false.
    async fn take_firing(
        &self,
        name: &str,
        due_ms: i64,
        next_ms: Option<i64>,
        ran: bool,
    ) -> StoreResult<bool>;

    /// Appends `entry` (JSON text) to session `key`, then keeps only its newest `keep`
    /// entries.
    async fn session_append(
        &self,
        key: &str,
        at_ms: i64,
        entry: &str,
        keep: usize,
    ) -> StoreResult<()>;

    /// The newest `limit` entries of session `key`, oldest first.
    async fn session_entries(&self, key: &str, limit: usize) -> StoreResult<Vec<SessionEntry>>;

    /// Forgets session `key`. Returns how many entries it had.
    async fn session_clear(&self, key: &str) -> StoreResult<u64>;

    /// Keeps the subscription of `queue` to `topic` (replacing its spec).
    async fn put_subscription(&self, topic: &str, queue: &str, spec: &str) -> StoreResult<()>;

    /// Forgets the subscription of `queue` to `topic`; whether it was kept.
    async fn delete_subscription(&self, topic: &str, queue: &str) -> StoreResult<bool>;

    /// Every kept subscription.
    async fn subscriptions(&self) -> StoreResult<Vec<StoredSubscription>>;
}
