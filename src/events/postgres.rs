//! The Postgres event store, for deployments with many replicas on one database.
//!
//! Consumers claim with `FOR UPDATE SKIP LOCKED`, so replicas sharing a consumer group never
//! get the same entry at once. `LISTEN/NOTIFY` only wakes consumers: after every reconnect the
//! listener wakes everyone to re-read the tables, and waiters also poll, so a lost
//! notification delays an event but never loses it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Executor, PgPool, Postgres, Row, Transaction};
use tokio::sync::broadcast;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::context::id::now_ms;
use crate::events::batch::Batcher;
use crate::events::sql_records::{SqlBacked, SqlRecords, sql_limit};
use crate::events::store::{
    Delivery, EventStore, Limits, StoreError, StoreResult, WAKE_ALL, distinct_topics, missing,
};
use crate::events::{DEAD_QUEUE, Event, dead_letter};

/// Longest wait for a pooled connection. While the database is down a call fails after this
/// (an SMTP sender gets its 451, `/readyz` its answer) instead of hanging for long.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct PostgresStore {
    pool: PgPool,
    claims: PgPool,
    batcher: Batcher,
    limits: Limits,
    channel: String,
    wake: broadcast::Sender<String>,
    /// Buffer trims, at most one per topic per interval: reads bound the buffer themselves,
    /// trimming only collects what they no longer return.
    trims: crate::events::batch::Throttle,
    records: SqlRecords<Postgres>,
    sweeps: crate::events::batch::Throttle,
    _listener: DropGuard,
}

impl PostgresStore {
    /// Connects to `url`; with `schema`, everything lives in that schema (created if missing),
    /// which lets tests and tenants share one database.
    pub async fn connect(
        url: &str,
        schema: Option<&str>,
        limits: Limits,
    ) -> StoreResult<PostgresStore> {
        let mut options = PgConnectOptions::from_str(url)?;
        if let Some(schema) = schema {
            if !schema
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(StoreError::Invalid(format!(
                    "schema `{schema}` must be lowercase letters, digits and `_`"
                )));
            }
            let bootstrap = PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options.clone())
                .await?;
            // `CREATE SCHEMA IF NOT EXISTS` is not safe against itself: two replicas starting at
            // once can both find the schema missing and one fails on the catalog's unique index.
            // A transaction-scoped advisory lock makes them take turns.
            let mut tx = bootstrap.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext('skillgate.schema:' || $1))")
                .bind(schema)
                .execute(&mut *tx)
                .await?;
            tx.execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
                .await?;
            tx.commit().await?;
            bootstrap.close().await;
            options = options.options([("search_path", schema)]);
        }
        // Every statement is planned for its own values: a cached generic plan knows neither a
        // queue's size nor a `LIMIT`, and picks a sequential scan and sort for a 500-row claim
        // on a long queue (tens of ms instead of one).
        let options = options.options([("plan_cache_mode", "force_custom_plan")]);
        // Claims, acks and nacks commit without waiting for the WAL flush: one lost in a server
        // crash only makes its entry visible again, or delivers it again (at least once still
        // holds). Emits wait.
        //
        // A queue table's statistics are always stale (it is drained and refilled all day, and
        // a new one has none): planned from them, a claim of the head of a long queue becomes a
        // bitmap scan of the whole queue and a sort (20 ms instead of 2 for 500 rows). Claims
        // walk the queue's index in order, which is always the right plan.
        let claims = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone().options([
                ("synchronous_commit", "off"),
                ("enable_bitmapscan", "off"),
                ("enable_sort", "off"),
            ]))
            .await?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        let channel = match schema {
            Some(s) => format!("sg_events_{s}"),
            None => "sg_events".to_string(),
        };
        let wake = broadcast::channel(1024).0;
        let stop = CancellationToken::new();
        spawn_listener(pool.clone(), channel.clone(), wake.clone(), stop.clone()).await?;
        let (writer, notify) = (pool.clone(), channel.clone());
        let batcher = Batcher::spawn(
            Arc::new(move |events: Vec<Event>| {
                let (pool, channel) = (writer.clone(), notify.clone());
                Box::pin(async move { insert_events(&pool, &channel, &events).await })
            }),
            2,
        );
        let store = PostgresStore {
            records: SqlRecords::new(pool.clone()),
            pool,
            claims,
            batcher,
            limits,
            channel,
            wake,
            trims: crate::events::batch::Throttle::default(),
            sweeps: crate::events::batch::Throttle::default(),
            _listener: stop.drop_guard(),
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
            "DELETE FROM sg_events WHERE topic = $1 AND (created_ms < $2 OR seq <= (
                 SELECT seq FROM sg_events WHERE topic = $1 ORDER BY seq DESC OFFSET $3 LIMIT 1))",
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
        let mut tx = self.pool.begin().await?;
        let expired = sqlx::query(
            "DELETE FROM sg_deliveries WHERE seq IN (
                 SELECT seq FROM sg_deliveries
                 WHERE topic = $1 AND queue = $2 AND visible_ms <= $3 AND attempts >= $4
                 FOR UPDATE SKIP LOCKED)
             RETURNING seq, body, attempts, position",
        )
        .bind(topic)
        .bind(queue)
        .bind(now)
        .bind(self.limits.delivery_limit as i32)
        .fetch_all(&mut *tx)
        .await?;
        if expired.is_empty() {
            tx.rollback().await?;
            return Ok(());
        }
        for delivery in in_order(&expired)? {
            let letter = dead_letter(&delivery.event, queue, delivery.attempts);
            sqlx::query(
                "INSERT INTO sg_queues (topic, name, created_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(&letter.topic)
            .bind(DEAD_QUEUE)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            self.emit_tx(&mut tx, &letter).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn emit_tx(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        event: &Event,
    ) -> StoreResult<()> {
        let body = event.to_body();
        // The same per-topic lock as a batch takes (see `insert_events`).
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('skillgate.events:' || $1))")
            .bind(&event.topic)
            .execute(&mut **tx)
            .await?;
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO sg_events (topic, id, body, created_ms) VALUES ($1, $2, $3, $4) RETURNING seq",
        )
        .bind(&event.topic)
        .bind(&event.id)
        .bind(&body)
        .bind(event.timestamp as i64)
        .fetch_one(&mut **tx)
        .await?;
        sqlx::query(
            "INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
             SELECT topic, name, $1, $2, $3 FROM sg_queues WHERE topic = $4",
        )
        .bind(&event.id)
        .bind(&body)
        .bind(seq)
        .bind(&event.topic)
        .execute(&mut **tx)
        .await?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(&event.topic)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

/// Forwards notifications to local waiters; after a reconnect, wakes everyone to re-read.
async fn spawn_listener(
    pool: PgPool,
    channel: String,
    wake: broadcast::Sender<String>,
    stop: CancellationToken,
) -> StoreResult<()> {
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen(&channel).await?;
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return,
                next = listener.try_recv() => next,
            };
            match next {
                Ok(Some(notification)) => {
                    let _ = wake.send(notification.payload().to_string());
                }
                // The connection dropped and was re-established: notifications may be lost.
                Ok(None) => {
                    let _ = wake.send(WAKE_ALL.to_string());
                }
                Err(err) => {
                    tracing::warn!(error = %err, "event store listener lost its connection; retrying");
                    let _ = wake.send(WAKE_ALL.to_string());
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    });
    Ok(())
}

/// Inserts a batch of events, their queue entries and the wakeups in one statement.
///
/// The statement first takes a lock per topic (held to its commit, taken in one order so two
/// batches never wait on each other in a circle): within a topic, a later `seq` then always
/// commits after an earlier one, so a reader following the buffer by `seq` (`Bus::follow`) never
/// passes an event that commits later with a smaller `seq`.
async fn insert_events(pool: &PgPool, channel: &str, events: &[Event]) -> StoreResult<()> {
    let topics: Vec<&str> = events.iter().map(|e| e.topic.as_str()).collect();
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let bodies: Vec<String> = events.iter().map(Event::to_body).collect();
    let times: Vec<i64> = events.iter().map(|e| e.timestamp as i64).collect();
    sqlx::query(
        "WITH e AS (
             INSERT INTO sg_events (topic, id, body, created_ms)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[])
             WHERE (SELECT count(*) FROM (
                 SELECT pg_advisory_xact_lock(k) FROM (
                     SELECT DISTINCT hashtext('skillgate.events:' || t) AS k
                     FROM UNNEST($1::text[]) t ORDER BY 1) keys) locked) >= 0
             RETURNING seq, topic, id, body),
         d AS (
             INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
             SELECT e.topic, q.name, e.id, e.body, e.seq FROM e JOIN sg_queues q ON q.topic = e.topic)
         SELECT pg_notify($5, t.topic) FROM (SELECT DISTINCT topic FROM e) t",
    )
    .bind(&topics)
    .bind(&ids)
    .bind(&bodies)
    .bind(&times)
    .bind(channel)
    .execute(pool)
    .await?;
    Ok(())
}

/// Queue rows (`seq, body, attempts, position`) as deliveries in queue order.
fn in_order(rows: &[sqlx::postgres::PgRow]) -> StoreResult<Vec<Delivery>> {
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

impl SqlBacked for PostgresStore {
    type Db = Postgres;
    fn records(&self) -> &SqlRecords<Postgres> {
        &self.records
    }
}

#[async_trait]
impl EventStore for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn emit(&self, event: &Event) -> StoreResult<()> {
        self.emit_many(std::slice::from_ref(event)).await
    }

    async fn emit_many(&self, events: &[Event]) -> StoreResult<()> {
        // Group commit: returns once the statement holding these events committed.
        self.batcher.emit(events.to_vec()).await?;
        for topic in distinct_topics(events) {
            if self.trims.due(topic, "") {
                self.trim(topic).await?;
            }
        }
        // Local waiters need not wait for the notification's round trip.
        for topic in distinct_topics(events) {
            let _ = self.wake.send(topic.to_string());
        }
        Ok(())
    }

    async fn create_queue(&self, topic: &str, queue: &str, replay: bool) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let created = sqlx::query(
            "INSERT INTO sg_queues (topic, name, created_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
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
                 SELECT topic, $1, id, body, seq FROM (
                     SELECT topic, id, body, seq FROM sg_events WHERE topic = $2 AND created_ms >= $3
                     ORDER BY seq DESC LIMIT $4) newest
                 ORDER BY seq",
            )
            .bind(queue)
            .bind(topic)
            .bind(self.cutoff())
            .bind(self.limits.buffer_events as i64)
            .execute(&mut *tx)
            .await?;
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&self.channel)
                .bind(topic)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(created)
    }

    async fn drop_queue(&self, topic: &str, queue: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
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

    async fn claim(
        &self,
        topic: &str,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<Delivery>> {
        let now = now_ms() as i64;
        let rows = sqlx::query(
            "UPDATE sg_deliveries SET attempts = attempts + 1, visible_ms = $1
             WHERE seq IN (SELECT seq FROM sg_deliveries
                           WHERE topic = $2 AND queue = $3 AND visible_ms <= $4 AND attempts < $5
                           ORDER BY position LIMIT $6
                           FOR UPDATE SKIP LOCKED)
             RETURNING seq, body, attempts, position",
        )
        .bind(now + visibility.as_millis() as i64)
        .bind(topic)
        .bind(queue)
        .bind(now)
        .bind(self.limits.delivery_limit as i32)
        .bind(sql_limit(max))
        .fetch_all(&self.claims)
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
        // On the claims pool: an ack lost in a server crash only delivers its entry again.
        let gone: Vec<i64> = sqlx::query_scalar(
            // `IS TRUE`: found by primary key only, however few rows the planner believes the
            // queue holds; the topic and queue only guard against another queue's receipts.
            "DELETE FROM sg_deliveries WHERE seq = ANY($3) AND (topic = $1 AND queue = $2) IS TRUE
             RETURNING seq",
        )
        .bind(topic)
        .bind(queue)
        .bind(as_seqs(receipts))
        .fetch_all(&self.claims)
        .await?;
        Ok(missing(receipts, gone.iter().map(|s| *s as u64)))
    }

    async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
        // One statement: the first receipt lands at the very front, the others after it in
        // order, all before the entry that was first.
        let moved: Vec<i64> = sqlx::query_scalar(
            "WITH front AS (
                 SELECT COALESCE(MIN(position), 0) AS p FROM sg_deliveries
                 WHERE topic = $1 AND queue = $2),
             r AS (SELECT seq, ord FROM UNNEST($3::bigint[]) WITH ORDINALITY AS r(seq, ord))
             UPDATE sg_deliveries d SET visible_ms = 0, position = front.p - $4 - 1 + r.ord
             FROM front, r
             WHERE d.seq = r.seq AND (d.topic = $1 AND d.queue = $2) IS TRUE
             RETURNING d.seq",
        )
        .bind(topic)
        .bind(queue)
        .bind(as_seqs(receipts))
        .bind(receipts.len() as i64)
        .fetch_all(&self.claims)
        .await?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(topic)
            .execute(&self.claims)
            .await?;
        Ok(missing(receipts, moved.iter().map(|s| *s as u64)))
    }

    async fn receipts(
        &self,
        topic: &str,
        queue: &str,
        ids: &[String],
    ) -> StoreResult<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT event_id, seq FROM sg_deliveries
             WHERE topic = $1 AND queue = $2 AND event_id = ANY($3) ORDER BY position",
        )
        .bind(topic)
        .bind(queue)
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id, seq)| (id, seq as u64)).collect())
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
        in_order(&rows)
    }

    async fn enqueue(&self, topic: &str, queue: &str, event: &Event) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO sg_queues (topic, name, created_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(topic)
        .bind(queue)
        .bind(now_ms() as i64)
        .execute(&mut *tx)
        .await?;
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
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(topic)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
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
        crate::events::migrations::POSTGRES.run(&self.pool).await?;
        Ok(())
    }
}

/// Receipts as the store's `BIGINT` sequence values.
fn as_seqs(receipts: &[u64]) -> Vec<i64> {
    receipts.iter().map(|r| *r as i64).collect()
}
