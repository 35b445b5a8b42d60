//! The embedded SQLite event store: one file (WAL mode), nothing to install.
//!
//! Writers take the database lock up front (`BEGIN IMMEDIATE`), so a claim can never deadlock
//! upgrading a read lock. With `synchronous = NORMAL` (the default here) a committed emit
//! survives a process crash; set `synchronous = full` to also survive power loss.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use tokio::sync::broadcast;

use crate::context::id::now_ms;
use crate::events::batch::Batcher;
use crate::events::sql_records::{SqlBacked, SqlRecords};
use crate::events::store::{
    Delivery, EventStore, Limits, StoreError, StoreResult, distinct_topics, missing,
};
use crate::events::{DEAD_QUEUE, Event, dead_letter};

pub struct SqliteStore {
    pool: SqlitePool,
    batcher: Batcher,
    limits: Limits,
    wake: broadcast::Sender<String>,
    /// Buffer trims, at most one per topic per interval: reads bound the buffer themselves,
    /// trimming only collects what they no longer return.
    trims: crate::events::batch::Throttle,
    records: SqlRecords<Sqlite>,
    sweeps: crate::events::batch::Throttle,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` and applies migrations.
    pub async fn open(path: &Path, limits: Limits, full_sync: bool) -> StoreResult<SqliteStore> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Invalid(format!("cannot create `{}`: {e}", dir.display()))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if full_sync {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .busy_timeout(Duration::from_secs(30));
        // One connection: SQLite has one writer at a time anyway, and this process's statements
        // then queue in order instead of sleeping in SQLite's busy handler (whole milliseconds
        // at a time) while another of its connections holds the lock. Another process on the
        // same file still waits through `busy_timeout`.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        let writer = pool.clone();
        let batcher = Batcher::spawn(
            Arc::new(move |events: Vec<Event>| {
                let pool = writer.clone();
                Box::pin(async move {
                    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                    insert_events(&mut tx, &events).await?;
                    tx.commit().await?;
                    Ok(())
                })
            }),
            1,
        );
        let store = SqliteStore {
            records: SqlRecords::new(pool.clone()),
            pool,
            batcher,
            limits,
            wake: broadcast::channel(1024).0,
            trims: crate::events::batch::Throttle::default(),
            sweeps: crate::events::batch::Throttle::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Events older than this (ms) are out of the replay buffer.
    fn cutoff(&self) -> i64 {
        now_ms().saturating_sub(self.limits.buffer_age.as_millis() as u64) as i64
    }

    /// Drops buffered events past the count and age limits.
    async fn trim(&self, topic: &str) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM sg_events WHERE topic = ?1 AND (created_ms < ?2 OR seq <= (
                 SELECT seq FROM sg_events WHERE topic = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?3))",
        )
        .bind(topic)
        .bind(self.cutoff())
        .bind(self.limits.buffer_events as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Moves entries that used up their deliveries to the `dead` queue of `<topic>.dead`.
    async fn sweep_dead(&self, topic: &str, queue: &str, now: i64) -> StoreResult<()> {
        let exhausted: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM sg_deliveries
             WHERE topic = ? AND queue = ? AND visible_ms <= ? AND attempts >= ?",
        )
        .bind(topic)
        .bind(queue)
        .bind(now)
        .bind(self.limits.delivery_limit as i64)
        .fetch_one(&self.pool)
        .await?;
        if exhausted == 0 {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        let expired = sqlx::query(
            "DELETE FROM sg_deliveries
             WHERE topic = ? AND queue = ? AND visible_ms <= ? AND attempts >= ?
             RETURNING seq, body, attempts, position",
        )
        .bind(topic)
        .bind(queue)
        .bind(now)
        .bind(self.limits.delivery_limit as i64)
        .fetch_all(&mut *tx)
        .await?;
        let mut dead_topics = Vec::new();
        for delivery in in_order(&expired)? {
            let letter = dead_letter(&delivery.event, queue, delivery.attempts);
            sqlx::query(
                "INSERT INTO sg_queues (topic, name, created_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(&letter.topic)
            .bind(DEAD_QUEUE)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            emit_tx(&mut tx, &letter).await?;
            dead_topics.push(letter.topic);
        }
        tx.commit().await?;
        for t in dead_topics {
            let _ = self.wake.send(t);
        }
        Ok(())
    }

    async fn begin(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// The event's INSERT; the `sg_events_fanout` trigger adds it to every queue of the topic in
/// the same statement.
const INSERT_EVENT: &str =
    "INSERT INTO sg_events (topic, id, body, created_ms) VALUES (?, ?, ?, ?)";

/// Queue rows (`seq, body, attempts, position`) as deliveries in queue order.
fn in_order(rows: &[sqlx::sqlite::SqliteRow]) -> StoreResult<Vec<Delivery>> {
    let mut out: Vec<(i64, Delivery)> = rows
        .iter()
        .map(|row| {
            Ok((
                row.try_get::<i64, _>("position")?,
                Delivery {
                    event: Event::from_body(row.try_get("body")?)?,
                    attempts: row.try_get::<i64, _>("attempts")? as u32,
                    receipt: row.try_get::<i64, _>("seq")? as u64,
                },
            ))
        })
        .collect::<StoreResult<_>>()?;
    out.sort_by_key(|(position, _)| *position);
    Ok(out.into_iter().map(|(_, d)| d).collect())
}

/// Inserts a batch of events, a statement per 256 of them, in the caller's transaction.
async fn insert_events(tx: &mut Transaction<'static, Sqlite>, events: &[Event]) -> StoreResult<()> {
    for chunk in events.chunks(256) {
        let rows = vec!["(?, ?, ?, ?)"; chunk.len()].join(", ");
        let sql = format!("INSERT INTO sg_events (topic, id, body, created_ms) VALUES {rows}");
        let mut query = sqlx::query(&sql);
        for event in chunk {
            query = query
                .bind(&event.topic)
                .bind(&event.id)
                .bind(event.to_body())
                .bind(event.timestamp as i64);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

async fn emit_tx(tx: &mut Transaction<'static, Sqlite>, event: &Event) -> StoreResult<()> {
    sqlx::query(INSERT_EVENT)
        .bind(&event.topic)
        .bind(&event.id)
        .bind(event.to_body())
        .bind(event.timestamp as i64)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

impl SqlBacked for SqliteStore {
    type Db = Sqlite;
    fn records(&self) -> &SqlRecords<Sqlite> {
        &self.records
    }
}

#[async_trait]
impl EventStore for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    async fn emit(&self, event: &Event) -> StoreResult<()> {
        self.emit_many(std::slice::from_ref(event)).await
    }

    async fn emit_many(&self, events: &[Event]) -> StoreResult<()> {
        // Group commit: returns once the transaction holding these events committed.
        self.batcher.emit(events.to_vec()).await?;
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

    async fn create_queue(&self, topic: &str, queue: &str, replay: bool) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let created = sqlx::query(
            "INSERT INTO sg_queues (topic, name, created_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(topic)
        .bind(queue)
        .bind(now_ms() as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if created && replay {
            sqlx::query(
                "INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
                 SELECT topic, ?1, id, body, seq FROM (
                     SELECT topic, id, body, seq FROM sg_events WHERE topic = ?2 AND created_ms >= ?3
                     ORDER BY seq DESC LIMIT ?4)
                 ORDER BY seq",
            )
            .bind(queue)
            .bind(topic)
            .bind(self.cutoff())
            .bind(self.limits.buffer_events as i64)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if created && replay {
            let _ = self.wake.send(topic.to_string());
        }
        Ok(created)
    }

    async fn drop_queue(&self, topic: &str, queue: &str) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM sg_deliveries WHERE topic = ? AND queue = ?")
            .bind(topic)
            .bind(queue)
            .execute(&mut *tx)
            .await?;
        let existed = sqlx::query("DELETE FROM sg_queues WHERE topic = ? AND name = ?")
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
            sqlx::query_scalar("SELECT name FROM sg_queues WHERE topic = ? ORDER BY name")
                .bind(topic)
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
        let rows = sqlx::query(
            "UPDATE sg_deliveries SET attempts = attempts + 1, visible_ms = ?1
             WHERE seq IN (SELECT seq FROM sg_deliveries
                           WHERE topic = ?2 AND queue = ?3 AND visible_ms <= ?4 AND attempts < ?5
                           ORDER BY position LIMIT ?6)
             RETURNING seq, body, attempts, position",
        )
        .bind(now + visibility.as_millis() as i64)
        .bind(topic)
        .bind(queue)
        .bind(now)
        .bind(self.limits.delivery_limit as i64)
        .bind(max as i64)
        .fetch_all(&self.pool)
        .await?;
        let out = in_order(&rows)?;
        // Exhausted entries are skipped above; they move to the dead topic when the queue runs
        // short (they may be all that is left).
        if out.len() < max && self.sweeps.due(topic, queue) {
            self.sweep_dead(topic, queue, now).await?;
        }
        Ok(out)
    }

    async fn ack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
        let mut gone: Vec<u64> = Vec::with_capacity(receipts.len());
        for chunk in receipts.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!(
                "DELETE FROM sg_deliveries WHERE seq IN ({marks}) AND topic = ? AND queue = ?
                 RETURNING seq"
            );
            let mut query = sqlx::query_scalar::<_, i64>(&sql);
            for receipt in chunk {
                query = query.bind(*receipt as i64);
            }
            let deleted = query.bind(topic).bind(queue).fetch_all(&self.pool).await?;
            gone.extend(deleted.into_iter().map(|s| s as u64));
        }
        Ok(missing(receipts, gone))
    }

    async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
        let mut tx = self.begin().await?;
        let mut moved = Vec::with_capacity(receipts.len());
        // Last first, each to the very front, so the first ends up first.
        for receipt in receipts.iter().rev() {
            let done = sqlx::query(
                "UPDATE sg_deliveries SET visible_ms = 0, position = (
                     SELECT MIN(position) FROM sg_deliveries WHERE topic = ?1 AND queue = ?2) - 1
                 WHERE seq = ?3 AND topic = ?1 AND queue = ?2",
            )
            .bind(topic)
            .bind(queue)
            .bind(*receipt as i64)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if done == 1 {
                moved.push(*receipt);
            }
        }
        tx.commit().await?;
        let _ = self.wake.send(topic.to_string());
        Ok(missing(receipts, moved))
    }

    async fn receipts(
        &self,
        topic: &str,
        queue: &str,
        ids: &[String],
    ) -> StoreResult<Vec<(String, u64)>> {
        let mut out = Vec::new();
        for id in ids {
            let rows: Vec<i64> = sqlx::query_scalar(
                "SELECT seq FROM sg_deliveries WHERE topic = ? AND queue = ? AND event_id = ?
                 ORDER BY position",
            )
            .bind(topic)
            .bind(queue)
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
            out.extend(rows.into_iter().map(|seq| (id.clone(), seq as u64)));
        }
        Ok(out)
    }

    async fn buffered(
        &self,
        topic: &str,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        let start: i64 = match after {
            None => 0,
            Some(id) => sqlx::query_scalar("SELECT seq FROM sg_events WHERE topic = ? AND id = ?")
                .bind(topic)
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .ok_or_else(|| {
                    StoreError::Invalid(format!("event `{id}` is not in the buffer of `{topic}`"))
                })?,
        };
        let bodies: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM (SELECT seq, body FROM sg_events WHERE topic = ?1 AND created_ms >= ?2
                               ORDER BY seq DESC LIMIT ?3)
             WHERE seq > ?4 ORDER BY seq LIMIT ?5",
        )
        .bind(topic)
        .bind(self.cutoff())
        .bind(self.limits.buffer_events as i64)
        .bind(start)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        bodies.iter().map(|b| Event::from_body(b)).collect()
    }

    async fn peek(&self, topic: &str, queue: &str, limit: usize) -> StoreResult<Vec<Delivery>> {
        let rows = sqlx::query(
            "SELECT seq, body, attempts, position FROM sg_deliveries
             WHERE topic = ? AND queue = ? ORDER BY position LIMIT ?",
        )
        .bind(topic)
        .bind(queue)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        in_order(&rows)
    }

    async fn enqueue(&self, topic: &str, queue: &str, event: &Event) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO sg_queues (topic, name, created_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(topic)
        .bind(queue)
        .bind(now_ms() as i64)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
             SELECT ?1, ?2, ?3, ?4, COALESCE(MAX(position), 0) + 1 FROM sg_deliveries
             WHERE topic = ?1 AND queue = ?2",
        )
        .bind(topic)
        .bind(queue)
        .bind(&event.id)
        .bind(event.to_body())
        .execute(&mut *tx)
        .await?;
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
        crate::events::migrations::SQLITE.run(&self.pool).await?;
        Ok(())
    }
}
