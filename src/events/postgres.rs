//! The Postgres event store, for deployments with many replicas on one database: what it does
//! its own way (see `sql_store.rs` for the rest).
//!
//! Consumers claim with `FOR UPDATE SKIP LOCKED`, so replicas sharing a consumer group never
//! get the same entry at once. `LISTEN/NOTIFY` only wakes consumers: after every reconnect the
//! listener wakes everyone to re-read the tables, and waiters also poll, so a lost
//! notification delays an event but never loses it.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Executor, PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::broadcast;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::context::id::now_ms;
use crate::events::Event;
use crate::events::batch::{Batcher, Item, claims_of, events_to_write};
use crate::events::records::KeyClaim;
use crate::events::sql_store::{Found, OwnWays, SqlDatabase, SqlStore};
use crate::events::store::{EventStore, Limits, StoreError, StoreResult, WAKE_ALL, missing};

/// Longest wait for a pooled connection. While the database is down a call fails after this
/// (an SMTP sender gets its 451, `/readyz` its answer) instead of hanging for long.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a pooled connection lives: sqlx's default, made explicit because [`OwnBackends`]
/// counts on it.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// The event store on Postgres.
pub type PostgresStore = SqlStore<Postgres>;

/// What the Postgres store keeps of its own: the channel it notifies on, and its listener
/// (stopped with the store).
pub struct PgOwn {
    channel: String,
    _listener: DropGuard,
}

impl SqlDatabase for Postgres {
    type Own = PgOwn;
    const KIND: &'static str = "postgres";

    fn migrations() -> &'static Migrator {
        &crate::events::migrations::POSTGRES
    }
}

impl SqlStore<Postgres> {
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
        // Claims, acks and nacks commit without waiting for the WAL flush: one lost in a server
        // crash only makes its entry visible again, or delivers it again (at least once still
        // holds). Emits wait.
        //
        // A queue table's statistics are always stale (it is drained and refilled all day, and
        // a new one has none): planned from them, a claim of the head of a long queue becomes a
        // bitmap scan of the whole queue and a sort (20 ms instead of 2 for 500 rows). Claims
        // walk the queue's index in order, which is always the right plan. With the sort and
        // the bitmap scan off, that is also the plan a claim's cached generic plan takes (its
        // `LIMIT` and queue unknown), so statements keep Postgres's plan caching: planning
        // each execution anew cost more than executing it (emits, claims and acks alike).
        let backends = Arc::new(OwnBackends::default());
        let claims = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .max_lifetime(CONNECTION_LIFETIME)
            .after_connect(noting_backend(backends.clone()))
            .connect_with(claims_options(options.clone()))
            .await?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .max_lifetime(CONNECTION_LIFETIME)
            .after_connect(noting_backend(backends.clone()))
            .connect_with(options)
            .await?;
        let channel = match schema {
            Some(s) => format!("sg_events_{s}"),
            None => "sg_events".to_string(),
        };
        let stop = CancellationToken::new();
        let (writer, notify) = (pool.clone(), channel.clone());
        let batcher = Batcher::spawn(
            Arc::new(move |items: Vec<Item>| {
                let (pool, channel) = (writer.clone(), notify.clone());
                Box::pin(async move { write_batch(&pool, &channel, items).await })
            }),
            2,
        );
        let own = PgOwn {
            channel: channel.clone(),
            _listener: stop.clone().drop_guard(),
        };
        let store = SqlStore::new(pool.clone(), claims, batcher, limits, own);
        spawn_listener(pool, channel, store.wake.clone(), backends, stop).await?;
        store.migrate().await?;
        Ok(store)
    }
}

impl OwnWays<Postgres> for SqlStore<Postgres> {
    async fn begin(&self) -> StoreResult<Transaction<'static, Postgres>> {
        Ok(self.pool.begin().await?)
    }

    /// Tells every replica's waiters that `topic` has news, when `conn`'s transaction commits.
    async fn notify(&self, conn: &mut PgConnection, topic: &str) -> StoreResult<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.own.channel)
            .bind(topic)
            .execute(conn)
            .await?;
        Ok(())
    }

    /// Emits `event` in `conn`'s transaction (a dead letter, as it leaves its queue).
    async fn emit_in(&self, conn: &mut PgConnection, event: &Event) -> StoreResult<()> {
        let body = event.to_body();
        // The same per-topic lock as a batch takes (see `insert_events`).
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('skillgate.events:' || $1))")
            .bind(&event.topic)
            .execute(&mut *conn)
            .await?;
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO sg_events (topic, id, body, created_ms) VALUES ($1, $2, $3, $4) RETURNING seq",
        )
        .bind(&event.topic)
        .bind(&event.id)
        .bind(&body)
        .bind(event.timestamp as i64)
        .fetch_one(&mut *conn)
        .await?;
        sqlx::query(
            "INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
             SELECT topic, name, $1, $2, $3 FROM sg_queues WHERE topic = $4",
        )
        .bind(&event.id)
        .bind(&body)
        .bind(seq)
        .bind(&event.topic)
        .execute(&mut *conn)
        .await?;
        self.notify(conn, &event.topic).await
    }

    /// Deletes the entries of `receipts`; the receipts it found none for.
    async fn acked(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
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

    /// Puts the entries of `receipts` back at the front, in order; the receipts it found none
    /// for.
    async fn nacked(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
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
        let mut conn = self.claims.acquire().await?;
        self.notify(&mut conn, topic).await?;
        Ok(missing(receipts, moved.iter().map(|s| *s as u64)))
    }

    /// The receipts of the entries of events `ids`, in queue order.
    async fn found(&self, topic: &str, queue: &str, ids: &[String]) -> StoreResult<Found> {
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
}

/// How the claims pool's connections are set (see `connect`).
fn claims_options(options: PgConnectOptions) -> PgConnectOptions {
    options.options([
        ("synchronous_commit", "off"),
        ("enable_bitmapscan", "off"),
        ("enable_sort", "off"),
    ])
}

/// The server processes (backend pids) of this store's own pooled connections.
///
/// Every notification names the process that sent it. One sent by this store's own connection
/// is its echo: the store woke this process's waiters as that transaction committed (every
/// `NOTIFY` it sends is paired with that), so the listener drops it, rather than have each idle
/// consumer claim again and find nothing. This is Postgres's own advice for telling one's own
/// notifications, widened from one session to a pool.
///
/// It may miss a live connection, whose echoes then wake as they always did; it must never hold
/// the pid of another replica's, whose news would then wait for the next poll. So a pid counts
/// only for [`CONNECTION_LIFETIME`] after its connection opened (the pool closes it by then, so
/// the operating system may hand the pid out again), and the whole set is forgotten when the
/// listener reconnects (the database may have restarted, and with it its pids).
#[derive(Default)]
struct OwnBackends(Mutex<HashMap<u32, Instant>>);

impl OwnBackends {
    fn opened(&self, pid: u32) {
        let mut own = self.0.lock();
        own.retain(|_, opened| opened.elapsed() < CONNECTION_LIFETIME);
        own.insert(pid, Instant::now());
    }

    fn sent(&self, pid: u32) -> bool {
        self.0
            .lock()
            .get(&pid)
            .is_some_and(|opened| opened.elapsed() < CONNECTION_LIFETIME)
    }

    fn forget(&self) {
        self.0.lock().clear();
    }
}

/// A pool's `after_connect`: notes the new connection's backend pid in `own`.
fn noting_backend(
    own: Arc<OwnBackends>,
) -> impl for<'c> Fn(
    &'c mut PgConnection,
    PoolConnectionMetadata,
) -> BoxFuture<'c, Result<(), sqlx::Error>>
+ Send
+ Sync
+ 'static {
    move |conn, _| {
        let own = own.clone();
        Box::pin(async move {
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(conn)
                .await?;
            own.opened(pid as u32);
            Ok(())
        })
    }
}

/// Forwards other processes' notifications to local waiters; after a reconnect, wakes everyone
/// to re-read.
async fn spawn_listener(
    pool: PgPool,
    channel: String,
    wake: broadcast::Sender<String>,
    own: Arc<OwnBackends>,
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
                    if !own.sent(notification.process_id()) {
                        let _ = wake.send(notification.payload().to_string());
                    }
                }
                // The connection dropped and was re-established: notifications may be lost.
                Ok(None) => {
                    own.forget();
                    let _ = wake.send(WAKE_ALL.to_string());
                }
                Err(err) => {
                    tracing::warn!(error = %err, "event store listener lost its connection; retrying");
                    own.forget();
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

/// Writes a batch: its events in one statement; with claims among its items, the claims first
/// and then the events of the won ones, in one transaction.
async fn write_batch(
    pool: &PgPool,
    channel: &str,
    items: Vec<Item>,
) -> StoreResult<HashMap<usize, KeyClaim>> {
    if items.iter().all(|item| item.claim.is_none()) {
        let events: Vec<Event> = items.into_iter().flat_map(|item| item.events).collect();
        insert_events(pool, channel, &events).await?;
        return Ok(HashMap::new());
    }
    let mut tx = pool.begin().await?;
    let claimed = claim_all(&mut tx, &items).await?;
    let events = events_to_write(items, &claimed);
    if !events.is_empty() {
        insert_events(&mut *tx, channel, &events).await?;
    }
    tx.commit().await?;
    Ok(claimed)
}

/// Claims the keys of the claimed `items` in the caller's transaction, in one statement, each
/// settled with its answer when won; then reads who holds the others.
async fn claim_all(
    tx: &mut Transaction<'static, Postgres>,
    items: &[Item],
) -> StoreResult<HashMap<usize, KeyClaim>> {
    let claims = claims_of(items);
    let now = now_ms() as i64;
    let keys: Vec<&str> = claims.iter().map(|(_, c)| c.key.as_str()).collect();
    let fingerprints: Vec<&str> = claims.iter().map(|(_, c)| c.fingerprint.as_str()).collect();
    let expires: Vec<i64> = claims
        .iter()
        .map(|(_, c)| now + c.ttl.as_millis() as i64)
        .collect();
    let answers: Vec<&str> = claims.iter().map(|(_, c)| c.answer.as_str()).collect();
    // A free key, or an expired claim, is taken; a held one is left alone.
    let won: Vec<String> = sqlx::query_scalar(
        "INSERT INTO sg_claims (key, fingerprint, expires_ms, response)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[])
         ON CONFLICT (key) DO UPDATE
             SET fingerprint = excluded.fingerprint, expires_ms = excluded.expires_ms,
                 response = excluded.response
             WHERE sg_claims.expires_ms <= $5
         RETURNING key",
    )
    .bind(&keys)
    .bind(&fingerprints)
    .bind(&expires)
    .bind(&answers)
    .bind(now)
    .fetch_all(&mut **tx)
    .await?;
    let lost: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !won.iter().any(|w| w == k))
        .collect();
    // Read in a statement of its own: it sees what other transactions committed meanwhile.
    let held: Vec<(String, String, Option<String>)> = if lost.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as("SELECT key, fingerprint, response FROM sg_claims WHERE key = ANY($1)")
            .bind(&lost)
            .fetch_all(&mut **tx)
            .await?
    };
    Ok(claims
        .iter()
        .map(|(i, claim)| {
            let got = if won.contains(&claim.key) {
                KeyClaim::Won
            } else {
                // Gone between the two statements (released): held by nobody that answered.
                let (fingerprint, response) = held
                    .iter()
                    .find(|(key, ..)| *key == claim.key)
                    .map_or((String::new(), None), |(_, f, r)| (f.clone(), r.clone()));
                KeyClaim::Held {
                    fingerprint,
                    response,
                }
            };
            (*i, got)
        })
        .collect())
}

/// Inserts a batch of events, their queue entries and the wakeups in one statement.
///
/// The statement first takes a lock per topic (held to its commit, taken in one order so two
/// batches never wait on each other in a circle): within a topic, a later `seq` then always
/// commits after an earlier one, so a reader following the buffer by `seq` (`Bus::follow`) never
/// passes an event that commits later with a smaller `seq`.
async fn insert_events<'c>(
    executor: impl Executor<'c, Database = Postgres>,
    channel: &str,
    events: &[Event],
) -> StoreResult<()> {
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
    .execute(executor)
    .await?;
    Ok(())
}

/// Receipts as the store's `BIGINT` sequence values.
fn as_seqs(receipts: &[u64]) -> Vec<i64> {
    receipts.iter().map(|r| *r as i64).collect()
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use super::*;

    /// A claim's cached generic plan, as the claims pool makes it, on a long queue the table's
    /// statistics know nothing of (they were taken when every queue was short, and autovacuum
    /// is off so they stay that way): the plan walks the queue's index in order and stops at
    /// the `LIMIT`, rather than fetching the whole queue and sorting it.
    #[tokio::test]
    async fn a_claims_generic_plan_walks_the_queue_index_on_stale_statistics() {
        let Ok(url) = std::env::var("DATABASE_URL") else {
            assert!(
                std::env::var("SKILLGATE_REQUIRE_PG").is_err(),
                "SKILLGATE_REQUIRE_PG is set but DATABASE_URL is not"
            );
            eprintln!("skipped: DATABASE_URL is not set (scripts/test sets it)");
            return;
        };
        let schema = format!(
            "t{}",
            crate::context::id::format(crate::context::id::next_id())
        );
        let store = PostgresStore::connect(&url, Some(&schema), Limits::default())
            .await
            .expect("store");
        sqlx::raw_sql(
            "ALTER TABLE sg_deliveries SET (autovacuum_enabled = false);
             INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
                 SELECT 't' || (g % 1000), 'q', 'e' || g, '{}', g FROM generate_series(1, 5000) g;
             ANALYZE sg_deliveries;
             INSERT INTO sg_deliveries (topic, queue, event_id, body, position)
                 SELECT 'long', 'q', 'l' || g, '{}', g FROM generate_series(1, 100000) g;",
        )
        .execute(store.pool())
        .await
        .expect("a long queue, unknown to the statistics");
        let options = PgConnectOptions::from_str(&url)
            .unwrap()
            .options([("search_path", schema.as_str())]);
        let mut conn = PgConnection::connect_with(&claims_options(options))
            .await
            .expect("a connection set as the claims pool's");
        sqlx::raw_sql(&format!(
            "SET plan_cache_mode = force_generic_plan; PREPARE claim AS {}",
            PostgresStore::CLAIM
        ))
        .execute(&mut conn)
        .await
        .expect("the claim prepared");
        let plan: Vec<String> =
            sqlx::query_scalar("EXPLAIN EXECUTE claim(0, 'long', 'q', 1, 5, 500)")
                .fetch_all(&mut conn)
                .await
                .expect("its plan");
        let plan = plan.join("\n");
        conn.close().await.ok();
        sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(store.pool())
            .await
            .ok();
        assert!(
            plan.contains("Index Scan using sg_deliveries_order")
                && !plan.contains("Sort")
                && !plan.contains("Bitmap"),
            "the claim walks the queue's index in order:\n{plan}"
        );
    }
}
