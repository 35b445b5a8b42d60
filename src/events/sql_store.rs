//! The SQL event store, one for SQLite and Postgres. What both databases read alike (`$N`
//! placeholders, `ON CONFLICT`, `RETURNING`, `LIMIT … OFFSET`) is written once here: the replay
//! buffer, queues made, listed, dropped and peeked, entries appended, claimed and swept to the
//! dead letters. What truly differs lives beside each database (`postgres.rs`, `sqlite.rs`):
//! connecting, how a transaction starts, how a batch of events is written and fanned out to the
//! queues, how receipts are settled, and how other processes hear of news.
//!
//! The store is written once as a macro over the two databases rather than as one generic
//! impl: sqlx's traits would need a dozen higher-ranked bounds on every generic function, and
//! this way each statement's binds and reads are compiled against each database's own types.

use sqlx::migrate::Migrator;
use sqlx::{Database, Pool, Transaction};
use tokio::sync::broadcast;

use crate::context::id::now_ms;
use crate::events::Event;
use crate::events::batch::{Batcher, Throttle};
use crate::events::sql_records::{Dialect, SqlRecords};
use crate::events::store::{Limits, StoreResult};

/// A database the SQL store runs on.
pub trait SqlDatabase: Dialect {
    /// What the store keeps of its own on this database (Postgres: its `NOTIFY` channel and
    /// the listener that forwards it).
    type Own: Send + Sync;
    /// The store's name in `/readyz` and the logs.
    const KIND: &'static str;
    /// The store's schema migrations on this database.
    fn migrations() -> &'static Migrator;
}

/// What each database does its own way, for the statements written once here.
pub(crate) trait OwnWays<D: Database> {
    /// A write transaction.
    async fn begin(&self) -> StoreResult<Transaction<'static, D>>;
    /// Tells the waiters of every process that `topic` has news, once `conn`'s transaction
    /// commits.
    async fn notify(&self, conn: &mut D::Connection, topic: &str) -> StoreResult<()>;
    /// Emits `event` in `conn`'s transaction (a dead letter, as it leaves its queue).
    async fn emit_in(&self, conn: &mut D::Connection, event: &Event) -> StoreResult<()>;
    /// Deletes the entries of `receipts`; the receipts it found none for.
    async fn acked(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>>;
    /// Puts the entries of `receipts` back at the front, in order; the receipts it found none
    /// for.
    async fn nacked(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>>;
    /// The receipts of the entries of events `ids`, in queue order.
    async fn found(&self, topic: &str, queue: &str, ids: &[String]) -> StoreResult<Found>;
}

/// Entries found by event id: (id, receipt).
pub type Found = Vec<(String, u64)>;

/// The event store on a SQL database `D`.
pub struct SqlStore<D: SqlDatabase> {
    pub(super) pool: Pool<D>,
    /// Where claims, acks and nacks run (Postgres: a pool of its own, see `postgres.rs`).
    pub(super) claims: Pool<D>,
    pub(super) batcher: Batcher,
    pub(super) limits: Limits,
    pub(super) wake: broadcast::Sender<String>,
    /// Buffer trims, at most one per topic per interval: reads bound the buffer themselves,
    /// trimming only collects what they no longer return.
    pub(super) trims: Throttle,
    pub(super) sweeps: Throttle,
    pub(super) records: SqlRecords<D>,
    pub(super) own: D::Own,
}

impl<D: SqlDatabase> SqlStore<D> {
    /// A store on `pool` (claims on `claims`), writing events through `batcher`.
    pub(super) fn new(
        pool: Pool<D>,
        claims: Pool<D>,
        batcher: Batcher,
        limits: Limits,
        own: D::Own,
    ) -> Self {
        SqlStore {
            records: SqlRecords::new(pool.clone()),
            pool,
            claims,
            batcher,
            limits,
            wake: broadcast::channel(1024).0,
            trims: Throttle::default(),
            sweeps: Throttle::default(),
            own,
        }
    }

    pub fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    /// Events older than this (ms) are out of the replay buffer.
    fn cutoff(&self) -> i64 {
        now_ms().saturating_sub(self.limits.buffer_age.as_millis() as u64) as i64
    }
}

/// The statements both databases share, and the [`EventStore`](crate::events::store::EventStore)
/// made of them, for database `$db`; `$lock` is what a claim adds to the rows it selects
/// (Postgres: `FOR UPDATE SKIP LOCKED`, so replicas never take one entry at once).
macro_rules! sql_event_store {
    ($db:ty, $lock:literal) => {
        impl crate::events::sql_records::SqlBacked for SqlStore<$db> {
            type Db = $db;
            fn records(&self) -> &SqlRecords<$db> {
                &self.records
            }
        }

        impl SqlStore<$db> {
            /// A claim: the first `$6` visible entries of a queue, in order, made invisible
            /// until `$1`.
            pub(crate) const CLAIM: &'static str = concat!(
                "UPDATE sg_deliveries SET attempts = attempts + 1, visible_ms = $1
                 WHERE seq IN (SELECT seq FROM sg_deliveries
                               WHERE topic = $2 AND queue = $3 AND visible_ms <= $4 AND attempts < $5
                               ORDER BY position LIMIT $6 ",
                $lock,
                ") RETURNING seq, body, attempts, position"
            );

            /// After `events` committed: their topics' buffers trimmed when due, and the
            /// waiters in this process woken (they need not wait for the database's wakeup).
            async fn emitted(&self, events: &[Event]) -> StoreResult<()> {
                for topic in distinct_topics(events) {
                    if self.trims.due(topic, "") {
                        self.trim(topic).await?;
                    }
                }
                for topic in distinct_topics(events) {
                    let _ = self.wake.send(topic.to_string());
                }
                Ok(())
            }

            /// Drops buffered events past the count and age limits.
            async fn trim(&self, topic: &str) -> StoreResult<()> {
                sqlx::query(
                    "DELETE FROM sg_events WHERE topic = $1 AND (created_ms < $2 OR seq <= (
                         SELECT seq FROM sg_events WHERE topic = $1 ORDER BY seq DESC LIMIT 1 OFFSET $3))",
                )
                .bind(topic)
                .bind(self.cutoff())
                .bind(self.limits.buffer_events as i64)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            /// Queue rows (`seq, body, attempts, position`) as deliveries in queue order.
            fn in_order(rows: &[<$db as Database>::Row]) -> StoreResult<Vec<Delivery>> {
                let mut out: Vec<(i64, Delivery)> = rows
                    .iter()
                    .map(|row| {
                        Ok((
                            row.try_get::<i64, _>("position")?,
                            Delivery {
                                event: Event::from_body(row.try_get("body")?)?,
                                attempts: row.try_get::<i32, _>("attempts")? as u32,
                                receipt: row.try_get::<i64, _>("seq")? as u64,
                            },
                        ))
                    })
                    .collect::<StoreResult<_>>()?;
                out.sort_by_key(|(position, _)| *position);
                Ok(out.into_iter().map(|(_, d)| d).collect())
            }

            /// Makes queue `queue` of `topic` unless it is there; whether it was made.
            async fn add_queue(
                conn: &mut <$db as Database>::Connection,
                topic: &str,
                queue: &str,
                now: i64,
            ) -> StoreResult<bool> {
                let made = sqlx::query(
                    "INSERT INTO sg_queues (topic, name, created_ms) VALUES ($1, $2, $3)
                     ON CONFLICT DO NOTHING",
                )
                .bind(topic)
                .bind(queue)
                .bind(now)
                .execute(conn)
                .await?;
                Ok(made.rows_affected() == 1)
            }

            /// Moves entries that used up their deliveries to the `dead` queue of
            /// `<topic>.dead`. Looked for first, so that a queue with none takes no write lock.
            async fn sweep_dead(&self, topic: &str, queue: &str, now: i64) -> StoreResult<()> {
                let limit = i64::from(self.limits.delivery_limit);
                let exhausted: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM sg_deliveries
                     WHERE topic = $1 AND queue = $2 AND visible_ms <= $3 AND attempts >= $4",
                )
                .bind(topic)
                .bind(queue)
                .bind(now)
                .bind(limit)
                .fetch_one(&self.pool)
                .await?;
                if exhausted == 0 {
                    return Ok(());
                }
                let mut tx = self.begin().await?;
                let expired = sqlx::query(concat!(
                    "DELETE FROM sg_deliveries WHERE seq IN (
                         SELECT seq FROM sg_deliveries
                         WHERE topic = $1 AND queue = $2 AND visible_ms <= $3 AND attempts >= $4 ",
                    $lock,
                    ") RETURNING seq, body, attempts, position"
                ))
                .bind(topic)
                .bind(queue)
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                let mut dead = Vec::new();
                for delivery in Self::in_order(&expired)? {
                    let letter = dead_letter(&delivery.event, queue, delivery.attempts);
                    Self::add_queue(&mut tx, &letter.topic, DEAD_QUEUE, now).await?;
                    self.emit_in(&mut tx, &letter).await?;
                    dead.push(letter.topic);
                }
                tx.commit().await?;
                for topic in dead {
                    let _ = self.wake.send(topic);
                }
                Ok(())
            }
        }

        #[async_trait]
        impl EventStore for SqlStore<$db> {
            fn kind(&self) -> &'static str {
                <$db as SqlDatabase>::KIND
            }

            async fn emit(&self, event: &Event) -> StoreResult<()> {
                self.emit_many(std::slice::from_ref(event)).await
            }

            async fn emit_many(&self, events: &[Event]) -> StoreResult<()> {
                // Group commit: returns once the transaction holding these events committed.
                self.batcher.emit(events.to_vec()).await?;
                self.emitted(events).await
            }

            async fn emit_claimed(&self, claim: &Claim, events: &[Event]) -> StoreResult<KeyClaim> {
                self.records.sweep_claims_if_due(now_ms() as i64).await?;
                // In the group commit too: the claim, its answer and the events in one.
                let won = self.batcher.emit_claimed(claim.clone(), events.to_vec()).await?;
                if won == KeyClaim::Won {
                    self.emitted(events).await?;
                }
                Ok(won)
            }

            async fn create_queue(&self, topic: &str, queue: &str, replay: bool) -> StoreResult<bool> {
                let mut tx = self.begin().await?;
                let created = Self::add_queue(&mut tx, topic, queue, now_ms() as i64).await?;
                if created && replay {
                    sqlx::query(
                        "INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
                         SELECT topic, $1, id, body, seq FROM (
                             SELECT topic, id, body, seq FROM sg_events
                             WHERE topic = $2 AND created_ms >= $3
                             ORDER BY seq DESC LIMIT $4) newest
                         ORDER BY seq",
                    )
                    .bind(queue)
                    .bind(topic)
                    .bind(self.cutoff())
                    .bind(self.limits.buffer_events as i64)
                    .execute(&mut *tx)
                    .await?;
                    self.notify(&mut tx, topic).await?;
                }
                tx.commit().await?;
                if created && replay {
                    let _ = self.wake.send(topic.to_string());
                }
                Ok(created)
            }

            async fn drop_queue(&self, topic: &str, queue: &str) -> StoreResult<bool> {
                let mut tx = self.begin().await?;
                sqlx::query("DELETE FROM sg_deliveries WHERE topic = $1 AND queue = $2")
                    .bind(topic)
                    .bind(queue)
                    .execute(&mut *tx)
                    .await?;
                let existed = sqlx::query("DELETE FROM sg_queues WHERE topic = $1 AND name = $2")
                    .bind(topic)
                    .bind(queue)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                tx.commit().await?;
                Ok(existed)
            }

            async fn queues(&self, topic: &str) -> StoreResult<Vec<String>> {
                Ok(
                    sqlx::query_scalar("SELECT name FROM sg_queues WHERE topic = $1 ORDER BY name")
                        .bind(topic)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn topics_with_queue(&self, queue: &str) -> StoreResult<Vec<String>> {
                Ok(
                    sqlx::query_scalar("SELECT topic FROM sg_queues WHERE name = $1 ORDER BY topic")
                        .bind(queue)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn claim(
                &self,
                topic: &str,
                queue: &str,
                max: usize,
                visibility: Duration,
            ) -> StoreResult<Vec<Delivery>> {
                let now = now_ms() as i64;
                let rows = sqlx::query(Self::CLAIM)
                    .bind(now + visibility.as_millis() as i64)
                    .bind(topic)
                    .bind(queue)
                    .bind(now)
                    .bind(i64::from(self.limits.delivery_limit))
                    .bind(sql_limit(max))
                    .fetch_all(&self.claims)
                    .await?;
                let out = Self::in_order(&rows)?;
                // Exhausted entries are skipped above; they move to the dead topic when the
                // queue runs short (they may be all that is left).
                if out.len() < max && self.sweeps.due(topic, queue) {
                    self.sweep_dead(topic, queue, now).await?;
                }
                Ok(out)
            }

            async fn ack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
                self.acked(topic, queue, receipts).await
            }

            async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
                let missed = self.nacked(topic, queue, receipts).await?;
                let _ = self.wake.send(topic.to_string());
                Ok(missed)
            }

            async fn receipts(
                &self,
                topic: &str,
                queue: &str,
                ids: &[String],
            ) -> StoreResult<Vec<(String, u64)>> {
                self.found(topic, queue, ids).await
            }

            async fn buffered(
                &self,
                topic: &str,
                after: Option<&str>,
                limit: usize,
            ) -> StoreResult<Vec<Event>> {
                let start: i64 = match after {
                    None => 0,
                    Some(id) => {
                        sqlx::query_scalar("SELECT seq FROM sg_events WHERE topic = $1 AND id = $2")
                            .bind(topic)
                            .bind(id)
                            .fetch_optional(&self.pool)
                            .await?
                            .ok_or_else(|| {
                                StoreError::Invalid(format!(
                                    "event `{id}` is not in the buffer of `{topic}`"
                                ))
                            })?
                    }
                };
                let bodies: Vec<String> = sqlx::query_scalar(
                    "SELECT body FROM (SELECT seq, body FROM sg_events WHERE topic = $1 AND created_ms >= $2
                                       ORDER BY seq DESC LIMIT $3) newest
                     WHERE seq > $4 ORDER BY seq LIMIT $5",
                )
                .bind(topic)
                .bind(self.cutoff())
                .bind(self.limits.buffer_events as i64)
                .bind(start)
                .bind(sql_limit(limit))
                .fetch_all(&self.pool)
                .await?;
                bodies.iter().map(|b| Event::from_body(b)).collect()
            }

            async fn peek(&self, topic: &str, queue: &str, limit: usize) -> StoreResult<Vec<Delivery>> {
                let rows = sqlx::query(
                    "SELECT seq, body, attempts, position FROM sg_deliveries
                     WHERE topic = $1 AND queue = $2 ORDER BY position LIMIT $3",
                )
                .bind(topic)
                .bind(queue)
                .bind(sql_limit(limit))
                .fetch_all(&self.pool)
                .await?;
                Self::in_order(&rows)
            }

            async fn enqueue(&self, topic: &str, queue: &str, event: &Event) -> StoreResult<()> {
                let mut tx = self.begin().await?;
                Self::add_queue(&mut tx, topic, queue, now_ms() as i64).await?;
                sqlx::query(
                    "INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
                     SELECT $1, $2, $3, $4, COALESCE(MAX(position), 0) + 1 FROM sg_deliveries
                     WHERE topic = $1 AND queue = $2",
                )
                .bind(topic)
                .bind(queue)
                .bind(&event.id)
                .bind(event.to_body())
                .execute(&mut *tx)
                .await?;
                self.notify(&mut tx, topic).await?;
                tx.commit().await?;
                let _ = self.wake.send(topic.to_string());
                Ok(())
            }

            fn wakeups(&self) -> broadcast::Receiver<String> {
                self.wake.subscribe()
            }

            async fn ping(&self) -> StoreResult<()> {
                sqlx::query("SELECT 1").execute(&self.pool).await?;
                Ok(())
            }

            async fn migrate(&self) -> StoreResult<()> {
                <$db as SqlDatabase>::migrations().run(&self.pool).await?;
                Ok(())
            }
        }
    };
}

mod shared {
    use std::time::Duration;

    use async_trait::async_trait;
    use sqlx::{Database, Row};
    use tokio::sync::broadcast;

    use super::{OwnWays, SqlDatabase, SqlStore};
    use crate::context::id::now_ms;
    use crate::events::records::{Claim, KeyClaim};
    use crate::events::sql_records::{SqlRecords, sql_limit};
    use crate::events::store::{Delivery, EventStore, StoreError, StoreResult, distinct_topics};
    use crate::events::{DEAD_QUEUE, Event, dead_letter};

    sql_event_store!(sqlx::Postgres, "FOR UPDATE SKIP LOCKED");
    sql_event_store!(sqlx::Sqlite, "");
}
