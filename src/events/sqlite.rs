//! The embedded SQLite event store: one file (WAL mode), nothing to install; what it does its
//! own way (see `sql_store.rs` for the rest).
//!
//! Writers take the database lock up front (`BEGIN IMMEDIATE`), so a claim can never deadlock
//! upgrading a read lock. With `synchronous = NORMAL` (the default here) a committed emit
//! survives a process crash; set `synchronous = full` to also survive power loss.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqliteConnection, Transaction};

use crate::context::id::now_ms;
use crate::events::Event;
use crate::events::batch::{Batcher, Item, claims_of, events_to_write};
use crate::events::records::{Claim, KeyClaim};
use crate::events::sql_store::{Found, OwnWays, SqlDatabase, SqlStore};
use crate::events::sqlite_runs::SqliteRuns;
use crate::events::store::{EventStore, Limits, StoreError, StoreResult, missing};

/// The event store on SQLite.
pub type SqliteStore = SqlStore<Sqlite>;

impl SqlDatabase for Sqlite {
    /// One process writes the file: its waiters are woken in the process, nothing to keep.
    type Own = ();
    const KIND: &'static str = "sqlite";

    fn migrations() -> &'static Migrator {
        &crate::events::migrations::SQLITE
    }
}

/// The name (then a number) of the thread that runs the store's connection (at most 15 bytes
/// in all, as Linux keeps a thread's name). The batches it writes are gathered on the writer
/// thread (`writer::THREAD`).
const CONNECTION_THREAD: &str = "skillgate-db-";

/// Tries at opening and migrating a file another process may be migrating at the same moment.
const MIGRATE_ATTEMPTS: u32 = 8;

/// `step` until it succeeds, [`MIGRATE_ATTEMPTS`] times at most, waiting a little longer
/// before each new try; the last try's error.
async fn retried<T, E, Fut: Future<Output = Result<T, E>>>(
    mut step: impl FnMut() -> Fut,
) -> Result<T, E> {
    let mut attempt = 1;
    loop {
        match step().await {
            Err(_) if attempt < MIGRATE_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
            }
            done => return done,
        }
    }
}

impl SqlStore<Sqlite> {
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
            .busy_timeout(Duration::from_secs(30))
            .thread_name(|n| format!("{CONNECTION_THREAD}{n}"));
        // One connection: SQLite has one writer at a time anyway, and this process's statements
        // then queue in order instead of sleeping in SQLite's busy handler (whole milliseconds
        // at a time) while another of its connections holds the lock. Another process on the
        // same file still waits through `busy_timeout`.
        // Switching a new file to WAL takes its lock without waiting through `busy_timeout`
        // when another process is migrating it: that is tried again too.
        let pool = retried(|| {
            SqlitePoolOptions::new()
                .max_connections(1)
                // The connection's worker thread runs the store's writes: it runs where the
                // scripts' threads run, off the core kept for the I/O threads.
                .after_connect(|_, _| {
                    Box::pin(async {
                        crate::cpus::confine_threads_named(CONNECTION_THREAD);
                        Ok(())
                    })
                })
                .connect_with(options.clone())
        })
        .await?;
        let writer = pool.clone();
        let batcher = Batcher::spawn_on(
            &crate::events::writer::handle(),
            Arc::new(move |items: Vec<Item>| {
                let pool = writer.clone();
                Box::pin(async move {
                    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                    let mut claimed = HashMap::new();
                    let now = now_ms() as i64;
                    for (i, claim) in claims_of(&items) {
                        claimed.insert(i, claim_in(&mut tx, claim, now).await?);
                    }
                    insert_events(&mut tx, &events_to_write(items, &claimed)).await?;
                    tx.commit().await?;
                    Ok(claimed)
                })
            }),
            1,
        );
        let mut store = SqlStore::new(pool.clone(), pool.clone(), batcher, limits, ());
        store
            .records
            .set_runs_writer(Box::new(SqliteRuns::new(pool, path, full_sync)));
        // Two processes opening a new file at once both find it unmigrated and both apply the
        // first migration; one's commit makes the other's fail (a duplicate version, a table
        // that exists). SQLite has no advisory lock to take first, so the loser tries again
        // and finds the work done.
        retried(|| store.migrate()).await?;
        Ok(store)
    }
}

impl OwnWays<Sqlite> for SqlStore<Sqlite> {
    async fn begin(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Nothing to tell: every waiter on the file is in this process, woken once the
    /// transaction commits.
    async fn notify(&self, _conn: &mut SqliteConnection, _topic: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Emits `event` in `conn`'s transaction (a dead letter, as it leaves its queue); the
    /// `sg_events_fanout` trigger adds it to every queue of its topic in the same statement.
    async fn emit_in(&self, conn: &mut SqliteConnection, event: &Event) -> StoreResult<()> {
        sqlx::query("INSERT INTO sg_events (topic, id, body, created_ms) VALUES ($1, $2, $3, $4)")
            .bind(&event.topic)
            .bind(&event.id)
            .bind(event.to_body())
            .bind(event.timestamp as i64)
            .execute(conn)
            .await?;
        Ok(())
    }

    /// Deletes the entries of `receipts`, 500 a statement; the receipts it found none for.
    async fn acked(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
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

    /// Puts the entries of `receipts` back at the front, in order; the receipts it found none
    /// for.
    async fn nacked(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
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
        Ok(missing(receipts, moved))
    }

    /// The receipts of the entries of events `ids`, in queue order.
    async fn found(&self, topic: &str, queue: &str, ids: &[String]) -> StoreResult<Found> {
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
}

/// Claims `claim.key` in the caller's transaction, settled with its answer when won; else who
/// holds it.
async fn claim_in(
    tx: &mut Transaction<'static, Sqlite>,
    claim: &Claim,
    now: i64,
) -> StoreResult<KeyClaim> {
    let won = sqlx::query(
        "INSERT INTO sg_claims (key, fingerprint, expires_ms, response) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (key) DO UPDATE
             SET fingerprint = excluded.fingerprint, expires_ms = excluded.expires_ms,
                 response = excluded.response
             WHERE sg_claims.expires_ms <= ?5
         RETURNING key",
    )
    .bind(&claim.key)
    .bind(&claim.fingerprint)
    .bind(now + claim.ttl.as_millis() as i64)
    .bind(&claim.answer)
    .bind(now)
    .fetch_optional(&mut **tx)
    .await?;
    if won.is_some() {
        return Ok(KeyClaim::Won);
    }
    let held: (String, Option<String>) =
        sqlx::query_as("SELECT fingerprint, response FROM sg_claims WHERE key = ?1")
            .bind(&claim.key)
            .fetch_one(&mut **tx)
            .await?;
    Ok(KeyClaim::Held {
        fingerprint: held.0,
        response: held.1,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A store on a new file (kept while the folder lives).
    async fn opened() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db"), Limits::default(), false)
            .await
            .unwrap();
        (dir, store)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_store_connection_runs_on_the_cpus_kept_for_background_work() {
        let _opened = opened().await;
        let connections = crate::cpus::threads_named(CONNECTION_THREAD);
        assert!(!connections.is_empty(), "no `{CONNECTION_THREAD}` thread");
        for tid in connections {
            assert_eq!(crate::cpus::cpus_of(Some(tid)), crate::cpus::expected());
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_store_batches_its_writes_on_a_thread_of_its_own() {
        let (_dir, store) = opened().await;
        store.emit(&Event::new("orders", "test")).await.unwrap();
        assert_eq!(
            crate::cpus::threads_named(crate::events::writer::THREAD).len(),
            1
        );
    }
}
