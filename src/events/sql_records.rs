//! The records of the SQL stores (claimed keys, schedules, subscriptions, sessions, runs), written
//! once for SQLite and Postgres: both read `$N` placeholders, `ON CONFLICT … DO UPDATE` and
//! `RETURNING`, so only what a statement reports back differs (the [`Dialect`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::{
    Arguments, ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Row,
    Type, error::BoxDynError,
};

use crate::context::id::now_ms;
use crate::events::records::{
    KeyClaim, NewRun, Records, RunFilter, RunTest, SessionEntry, StoredRun, StoredSchedule,
    StoredSubscription,
};
use crate::events::run_blocks::{self, BLOCK_RUNS, Packed};
use crate::events::store::{StoreError, StoreResult};

/// Claims between two sweeps of expired ones.
const CLAIM_SWEEP_EVERY: u64 = 256;

/// What differs between the SQL databases for the records: how a statement's result tells the
/// rows it touched (sqlx gives each database's result a type of its own).
pub trait Dialect: Database {
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// The placeholder of the `n`th value (from 1) in a statement of many values: sqlx binds
    /// SQLite's numbered ones by looking each name up among all of them, so a long `INSERT`
    /// there uses plain `?`.
    fn placeholder(n: usize) -> String;

    /// This database's statements of the runs record, made as first used.
    fn runs_sql() -> &'static RunsSql;

    /// The `INSERT` of [`RUNS_STATEMENTS`]`[size]` runs, made once.
    fn runs_insert_of(size: usize) -> &'static str {
        Self::runs_sql().inserts[size].get_or_init(|| runs_insert::<Self>(RUNS_STATEMENTS[size]))
    }

    /// The `INSERT` of a block of plain runs ([`block_insert`]), made once.
    fn block_insert() -> &'static str {
        Self::runs_sql().block.get_or_init(block_insert::<Self>)
    }
}

impl Dialect for sqlx::Sqlite {
    fn rows_affected(result: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn placeholder(_: usize) -> String {
        "?".into()
    }

    fn runs_sql() -> &'static RunsSql {
        static SQL: RunsSql = RunsSql::new();
        &SQL
    }
}

impl Dialect for sqlx::Postgres {
    fn rows_affected(result: &sqlx::postgres::PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn placeholder(n: usize) -> String {
        format!("${n}")
    }

    fn runs_sql() -> &'static RunsSql {
        static SQL: RunsSql = RunsSql::new();
        &SQL
    }
}

/// The statements that write the runs record on one database, each made at its first use:
/// the `INSERT`s of rows by size, and that of a block. Each database keeps its own (a `static`
/// in a generic function would be one for all of them).
pub struct RunsSql {
    inserts: [OnceLock<String>; RUNS_STATEMENTS.len()],
    block: OnceLock<String>,
}

impl RunsSql {
    const fn new() -> RunsSql {
        RunsSql {
            inserts: [const { OnceLock::new() }; RUNS_STATEMENTS.len()],
            block: OnceLock::new(),
        }
    }
}

/// Writes a batch of runs its own way (the SQLite store's, `events::sqlite_runs`), in place of
/// the statement the SQL stores share.
#[async_trait]
pub trait RunsWriter: Send + Sync {
    async fn put_runs(&self, runs: &[NewRun<'_>]) -> StoreResult<()>;

    /// The runtime the recorder's writer should run on, so that the batches are written there.
    fn runtime(&self) -> Option<tokio::runtime::Handle>;
}

/// A SQL store's hold on its records: the pool they are written on, and the count of keys
/// claimed (every `CLAIM_SWEEP_EVERY`th claim first sweeps the expired ones).
pub struct SqlRecords<D: Database> {
    pool: Pool<D>,
    key_claims: AtomicU64,
    /// Writes the runs record in place of the shared statement ([`RunsWriter`]).
    runs_writer: Option<Box<dyn RunsWriter>>,
}

impl<D: Database> SqlRecords<D> {
    pub fn new(pool: Pool<D>) -> Self {
        SqlRecords {
            pool,
            key_claims: AtomicU64::new(0),
            runs_writer: None,
        }
    }

    /// Has `writer` write the runs record.
    pub fn set_runs_writer(&mut self, writer: Box<dyn RunsWriter>) {
        self.runs_writer = Some(writer);
    }
}

impl<D: Database> SqlRecords<D>
where
    for<'c> &'c mut D::Connection: Executor<'c, Database = D>,
    for<'q> D::Arguments<'q>: IntoArguments<'q, D>,
    for<'q> i64: Encode<'q, D> + Type<D>,
{
    /// Counts a claim about to be made; every `CLAIM_SWEEP_EVERY`th first deletes the claims
    /// expired by `now` (ms), so the table does not grow with keys nobody asks for again.
    pub async fn sweep_claims_if_due(&self, now: i64) -> StoreResult<()> {
        if self
            .key_claims
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(CLAIM_SWEEP_EVERY)
        {
            sqlx::query("DELETE FROM sg_claims WHERE expires_ms <= $1")
                .bind(now)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}

/// A store whose records are kept in SQL tables (`sg_claims`, `sg_schedules`,
/// `sg_subscriptions`, `sg_sessions`, created by its migrations).
pub trait SqlBacked: Send + Sync {
    type Db: Dialect;
    fn records(&self) -> &SqlRecords<Self::Db>;
}

#[async_trait]
impl<S> Records for S
where
    S: SqlBacked,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> <S::Db as Database>::Arguments<'q>: IntoArguments<'q, S::Db>,
    for<'q> &'q str: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> i64: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<i64>: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<&'q str>: Encode<'q, S::Db> + Type<S::Db>,
    for<'r> String: Decode<'r, S::Db> + Type<S::Db>,
    for<'r> Option<String>: Decode<'r, S::Db> + Type<S::Db>,
    for<'a> &'a str: ColumnIndex<<S::Db as Database>::Row>,
    for<'r> SessionEntry: FromRow<'r, <S::Db as Database>::Row>,
    for<'r> StoredSchedule: FromRow<'r, <S::Db as Database>::Row>,
    for<'r> StoredSubscription: FromRow<'r, <S::Db as Database>::Row>,
    for<'r> StoredRun: FromRow<'r, <S::Db as Database>::Row>,
    for<'r> RunRow: FromRow<'r, <S::Db as Database>::Row>,
    for<'r> BlockRow: FromRow<'r, <S::Db as Database>::Row>,
    for<'r> Straddling: FromRow<'r, <S::Db as Database>::Row>,
    for<'r> i64: Decode<'r, S::Db>,
    for<'q> &'q [u8]: Encode<'q, S::Db> + Type<S::Db>,
    usize: ColumnIndex<<S::Db as Database>::Row>,
{
    async fn claim_key(
        &self,
        key: &str,
        fingerprint: &str,
        ttl: Duration,
    ) -> StoreResult<KeyClaim> {
        let records = self.records();
        let now = now_ms() as i64;
        records.sweep_claims_if_due(now).await?;
        // One statement: a free key (or an expired claim) is taken; a held one is left alone.
        for _ in 0..2 {
            let won = sqlx::query(
                "INSERT INTO sg_claims (key, fingerprint, expires_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE
                     SET fingerprint = excluded.fingerprint, expires_ms = excluded.expires_ms, response = NULL
                     WHERE sg_claims.expires_ms <= $4
                 RETURNING key",
            )
            .bind(key)
            .bind(fingerprint)
            .bind(now + ttl.as_millis() as i64)
            .bind(now)
            .fetch_optional(&records.pool)
            .await?;
            if won.is_some() {
                return Ok(KeyClaim::Won);
            }
            let held = sqlx::query("SELECT fingerprint, response FROM sg_claims WHERE key = $1")
                .bind(key)
                .fetch_optional(&records.pool)
                .await?;
            // Released between the two statements: try again.
            if let Some(row) = held {
                return Ok(KeyClaim::Held {
                    fingerprint: row.try_get("fingerprint")?,
                    response: row.try_get("response")?,
                });
            }
        }
        Err(StoreError::Write(format!(
            "the claim on `{key}` changed hands twice while it was read"
        )))
    }

    async fn settle_key(&self, key: &str, response: &str, ttl: Duration) -> StoreResult<()> {
        sqlx::query("UPDATE sg_claims SET response = $1, expires_ms = $2 WHERE key = $3")
            .bind(response)
            .bind(now_ms() as i64 + ttl.as_millis() as i64)
            .bind(key)
            .execute(&self.records().pool)
            .await?;
        Ok(())
    }

    async fn release_key(&self, key: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM sg_claims WHERE key = $1")
            .bind(key)
            .execute(&self.records().pool)
            .await?;
        Ok(())
    }

    async fn put_schedule(
        &self,
        name: &str,
        spec: &str,
        next_ms: Option<i64>,
    ) -> StoreResult<bool> {
        let written = sqlx::query(
            "INSERT INTO sg_schedules (name, spec, next_ms, runs) VALUES ($1, $2, $3, 0)
             ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, next_ms = excluded.next_ms, runs = 0
                 WHERE sg_schedules.spec <> excluded.spec",
        )
        .bind(name)
        .bind(spec)
        .bind(next_ms)
        .execute(&self.records().pool)
        .await?;
        Ok(S::Db::rows_affected(&written) > 0)
    }

    async fn set_schedule_spec(&self, name: &str, spec: &str) -> StoreResult<bool> {
        let written = sqlx::query("UPDATE sg_schedules SET spec = $1 WHERE name = $2")
            .bind(spec)
            .bind(name)
            .execute(&self.records().pool)
            .await?;
        Ok(S::Db::rows_affected(&written) > 0)
    }

    async fn delete_schedule(&self, name: &str) -> StoreResult<bool> {
        let deleted = sqlx::query("DELETE FROM sg_schedules WHERE name = $1")
            .bind(name)
            .execute(&self.records().pool)
            .await?;
        Ok(S::Db::rows_affected(&deleted) > 0)
    }

    async fn schedules(&self) -> StoreResult<Vec<StoredSchedule>> {
        Ok(sqlx::query_as::<_, StoredSchedule>(
            "SELECT name, spec, next_ms, runs FROM sg_schedules ORDER BY name",
        )
        .fetch_all(&self.records().pool)
        .await?)
    }

    async fn take_firing(
        &self,
        name: &str,
        due_ms: i64,
        next_ms: Option<i64>,
        ran: bool,
    ) -> StoreResult<bool> {
        let taken = sqlx::query(
            "UPDATE sg_schedules SET next_ms = $3, runs = runs + $4 WHERE name = $1 AND next_ms = $2",
        )
        .bind(name)
        .bind(due_ms)
        .bind(next_ms)
        .bind(i64::from(ran))
        .execute(&self.records().pool)
        .await?;
        Ok(S::Db::rows_affected(&taken) == 1)
    }

    async fn session_append(
        &self,
        key: &str,
        at_ms: i64,
        entry: &str,
        keep: usize,
    ) -> StoreResult<()> {
        let mut tx = self.records().pool.begin().await?;
        sqlx::query("INSERT INTO sg_sessions (key, at_ms, entry) VALUES ($1, $2, $3)")
            .bind(key)
            .bind(at_ms)
            .bind(entry)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM sg_sessions WHERE key = $1 AND id NOT IN
                 (SELECT id FROM sg_sessions WHERE key = $1 ORDER BY id DESC LIMIT $2)",
        )
        .bind(key)
        .bind(sql_limit(keep))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn session_entries(&self, key: &str, limit: usize) -> StoreResult<Vec<SessionEntry>> {
        Ok(sqlx::query_as::<_, SessionEntry>(
            "SELECT at_ms, entry FROM (SELECT id, at_ms, entry FROM sg_sessions WHERE key = $1
                 ORDER BY id DESC LIMIT $2) AS newest ORDER BY id",
        )
        .bind(key)
        .bind(sql_limit(limit))
        .fetch_all(&self.records().pool)
        .await?)
    }

    async fn session_clear(&self, key: &str) -> StoreResult<u64> {
        let deleted = sqlx::query("DELETE FROM sg_sessions WHERE key = $1")
            .bind(key)
            .execute(&self.records().pool)
            .await?;
        Ok(S::Db::rows_affected(&deleted))
    }

    async fn put_subscription(&self, topic: &str, queue: &str, spec: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO sg_subscriptions (topic, queue, spec) VALUES ($1, $2, $3)
             ON CONFLICT (topic, queue) DO UPDATE SET spec = excluded.spec",
        )
        .bind(topic)
        .bind(queue)
        .bind(spec)
        .execute(&self.records().pool)
        .await?;
        Ok(())
    }

    async fn delete_subscription(&self, topic: &str, queue: &str) -> StoreResult<bool> {
        let deleted = sqlx::query("DELETE FROM sg_subscriptions WHERE topic = $1 AND queue = $2")
            .bind(topic)
            .bind(queue)
            .execute(&self.records().pool)
            .await?;
        Ok(S::Db::rows_affected(&deleted) > 0)
    }

    async fn subscriptions(&self) -> StoreResult<Vec<StoredSubscription>> {
        Ok(sqlx::query_as::<_, StoredSubscription>(
            "SELECT topic, queue, spec FROM sg_subscriptions ORDER BY topic, queue",
        )
        .fetch_all(&self.records().pool)
        .await?)
    }

    async fn put_runs(&self, runs: &[NewRun<'_>]) -> StoreResult<()> {
        if let Some(writer) = &self.records().runs_writer {
            return writer.put_runs(runs).await;
        }
        // A statement of many rows: one step of the database for a batch, not one a run.
        let mut tx = self.records().pool.begin().await?;
        let mut packed = Vec::new();
        for statement in runs_statements(runs, RunShape::of) {
            match statement {
                RunsStatement::Rows { size, runs: chunk } => {
                    // Room for every value at once: a statement's values grown by doubling
                    // take fresh memory (and its page faults) several times a batch.
                    let mut values = <S::Db as Database>::Arguments::default();
                    values.reserve(
                        chunk.len() * RUN_COLUMNS,
                        chunk.iter().map(NewRun::text_bytes).sum(),
                    );
                    for run in chunk {
                        add_run::<S::Db>(&mut values, run).map_err(sqlx::Error::Encode)?;
                    }
                    sqlx::query_with(S::Db::runs_insert_of(size), values)
                        .execute(&mut *tx)
                        .await?;
                }
                RunsStatement::Block(chunk) => {
                    let head = run_blocks::pack(chunk, &mut packed);
                    sqlx::query(S::Db::block_insert())
                        .bind(head.first_ms)
                        .bind(&packed[..])
                        .bind(head.runs)
                        .bind(head.last_ms)
                        .execute(&mut *tx)
                        .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(())
    }

    fn runs_runtime(&self) -> Option<tokio::runtime::Handle> {
        self.records().runs_writer.as_ref()?.runtime()
    }

    async fn runs(&self, filter: &RunFilter) -> StoreResult<Vec<StoredRun>> {
        // No recorded text holds a NUL (Postgres's text cannot), so a filter with one matches
        // nothing; Postgres would refuse the statement.
        let fields = [
            &filter.door,
            &filter.skill,
            &filter.status,
            &filter.principal,
            &filter.text,
        ];
        if filter.limit == 0
            || fields
                .iter()
                .any(|f| f.as_ref().is_some_and(|f| f.contains('\0')))
        {
            return Ok(Vec::new());
        }
        // `LIKE` with `\` escaping the pattern's own `%` and `_`, on lowered text: the same
        // case-blind match on both databases (SQLite's `LIKE` ignores ASCII case, Postgres's
        // does not).
        let text = filter.text.as_ref().map(|t| {
            let escaped = t
                .to_lowercase()
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        // Rows newest first, a page of them at a time: a row of one run is filtered by the
        // database, a block only by status and time there and its runs here. A page of rows
        // may give fewer runs than it has rows (blocks none of whose runs match), so the
        // listing reads on until it has its runs or the rows run out.
        let mut found = Vec::new();
        let test = filter.tester();
        let mut newest = filter.before.map(run_blocks::rows_before);
        loop {
            let rows = sqlx::query_as::<_, RunRow>(
                "SELECT seq, id, door, principal, skill, started_ms, duration_us, status, problem,
                     parent, args, result, detail, packed FROM sg_runs
                 WHERE ($7 IS NULL OR seq <= $7) AND (
                     (packed IS NULL
                      AND ($1 IS NULL OR door = $1) AND ($2 IS NULL OR skill = $2)
                      AND ($3 IS NULL OR status = $3) AND ($4 IS NULL OR principal = $4)
                      AND ($5 IS NULL OR started_ms >= $5) AND ($6 IS NULL OR started_ms < $6)
                      AND ($8 IS NULL OR LOWER(args) LIKE $8 ESCAPE '\\'
                           OR LOWER(result) LIKE $8 ESCAPE '\\'))
                     OR (packed IS NOT NULL AND ($3 IS NULL OR $3 = 'ok')
                      AND ($5 IS NULL OR started_last_ms >= $5)
                      AND ($6 IS NULL OR started_ms < $6)))
                 ORDER BY seq DESC LIMIT $9",
            )
            .bind(filter.door.as_deref())
            .bind(filter.skill.as_deref())
            .bind(filter.status.as_deref())
            .bind(filter.principal.as_deref())
            .bind(filter.since_ms)
            .bind(filter.until_ms)
            .bind(newest)
            .bind(text.as_deref())
            .bind(sql_limit(filter.limit))
            .fetch_all(&self.records().pool)
            .await?;
            let read_all = rows.len() < filter.limit;
            newest = rows.last().map(|row| row.run.seq - 1);
            for row in rows {
                row.runs_into(&test, &mut found)?;
                if found.len() >= filter.limit {
                    found.truncate(filter.limit);
                    return Ok(found);
                }
            }
            if read_all {
                return Ok(found);
            }
        }
    }

    async fn run(&self, id: &str) -> StoreResult<Option<StoredRun>> {
        let pool = &self.records().pool;
        let own = sqlx::query_as::<_, StoredRun>(
            "SELECT seq, id, door, principal, skill, started_ms, duration_us, status, problem,
                 parent, args, result, detail FROM sg_runs WHERE id = $1 AND packed IS NULL",
        )
        .bind(id)
        .fetch_optional(pool)
        .await?;
        if let Some(mut run) = own {
            run.seq = run_blocks::run_seq(run.seq, None);
            return Ok(Some(run));
        }
        // Else in a block, if anywhere: newest first, a few at a time.
        let mut newest = None;
        loop {
            let blocks = sqlx::query_as::<_, BlockRow>(
                "SELECT seq, packed FROM sg_runs
                 WHERE packed IS NOT NULL AND ($1 IS NULL OR seq <= $1)
                 ORDER BY seq DESC LIMIT $2",
            )
            .bind(newest)
            .bind(BLOCKS_READ)
            .fetch_all(pool)
            .await?;
            for block in &blocks {
                let runs = run_blocks::unpack(block.seq, &block.packed)?;
                if let Some(run) = runs.iter().find(|p| p.run.id == id) {
                    return Ok(Some(run.stored(block.seq)));
                }
            }
            if blocks.len() < BLOCKS_READ as usize {
                return Ok(None);
            }
            newest = blocks.last().map(|b| b.seq - 1);
        }
    }

    async fn prune_runs(&self, before_ms: i64, keep: usize) -> StoreResult<u64> {
        let keep = sql_limit(keep);
        let mut tx = self.records().pool.begin().await?;
        // Runs started before `before_ms`: the rows all of whose runs did, then those of the
        // blocks that hold some.
        let gone: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM sg_runs WHERE COALESCE(started_last_ms, started_ms) < $1
             RETURNING COALESCE(packed_runs, 1)",
        )
        .bind(before_ms)
        .fetch_all(&mut *tx)
        .await?;
        let mut pruned: i64 = gone.iter().sum();
        let aging = sqlx::query_as::<_, BlockRow>(
            "SELECT seq, packed FROM sg_runs WHERE packed IS NOT NULL AND started_ms < $1",
        )
        .bind(before_ms)
        .fetch_all(&mut *tx)
        .await?;
        for block in aging {
            let runs = run_blocks::unpack(block.seq, &block.packed)?;
            let kept: Vec<bool> = runs.iter().map(|p| p.run.started_ms >= before_ms).collect();
            pruned += keep_in_block::<S::Db>(&mut tx, block.seq, &runs, &kept).await?;
        }
        // All but the newest `keep` of the runs left: the rows all of whose runs are past them
        // (`newer`: the runs of the rows after a row), then the oldest runs of the block they
        // end in.
        let gone: Vec<i64> = sqlx::query_scalar(concat!(
            "DELETE FROM sg_runs WHERE seq IN (SELECT seq FROM ",
            counted_runs!(),
            " WHERE newer >= $1) RETURNING COALESCE(packed_runs, 1)"
        ))
        .bind(keep)
        .fetch_all(&mut *tx)
        .await?;
        pruned += gone.iter().sum::<i64>();
        let boundary = sqlx::query_as::<_, Straddling>(concat!(
            "SELECT seq, packed, newer FROM ",
            counted_runs!(),
            " WHERE packed IS NOT NULL AND newer + packed_runs > $1"
        ))
        .bind(keep)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(block) = boundary {
            let runs = run_blocks::unpack(block.seq, &block.packed)?;
            // Its newest `room` runs are kept (its runs are oldest first).
            let room = usize::try_from(keep - block.newer).unwrap_or(0);
            let kept: Vec<bool> = (0..runs.len()).map(|at| runs.len() - at <= room).collect();
            pruned += keep_in_block::<S::Db>(&mut tx, block.seq, &runs, &kept).await?;
        }
        tx.commit().await?;
        Ok(pruned as u64)
    }
}

/// The rows of `sg_runs` as pruning by count reads them (a subquery, `counted`): each with
/// `newer`, the runs of the rows after it, which both statements of that step compare with the
/// count kept.
macro_rules! counted_runs {
    () => {
        "(SELECT seq, packed, packed_runs,
             CAST(SUM(COALESCE(packed_runs, 1)) OVER (ORDER BY seq DESC) AS BIGINT)
                 - COALESCE(packed_runs, 1) AS newer
          FROM sg_runs) AS counted"
    };
}
use counted_runs;

/// Writes the block of row `seq` again with only the `runs` whose `kept` is true (or deletes
/// it when none is); how many runs it lost.
async fn keep_in_block<D>(
    conn: &mut D::Connection,
    seq: i64,
    runs: &[Packed<'_>],
    kept: &[bool],
) -> StoreResult<i64>
where
    D: Database,
    for<'c> &'c mut D::Connection: Executor<'c, Database = D>,
    for<'q> D::Arguments<'q>: IntoArguments<'q, D>,
    for<'q> i64: Encode<'q, D> + Type<D>,
    for<'q> &'q [u8]: Encode<'q, D> + Type<D>,
{
    let mut packed = Vec::new();
    let head = run_blocks::repack(runs, kept, &mut packed);
    let taken = runs.len() as i64 - head.map_or(0, |h| h.runs);
    match head {
        _ if taken == 0 => {}
        Some(head) => {
            sqlx::query(
                "UPDATE sg_runs SET packed = $1, packed_runs = $2, started_ms = $3,
                     started_last_ms = $4 WHERE seq = $5",
            )
            .bind(&packed[..])
            .bind(head.runs)
            .bind(head.first_ms)
            .bind(head.last_ms)
            .bind(seq)
            .execute(conn)
            .await?;
        }
        None => {
            sqlx::query("DELETE FROM sg_runs WHERE seq = $1")
                .bind(seq)
                .execute(conn)
                .await?;
        }
    }
    Ok(taken)
}

/// Blocks a lookup by id reads at once.
const BLOCKS_READ: i64 = 16;

/// A row of `sg_runs` as a listing reads it: a run of its own, or a block of plain runs
/// (`packed`, [`run_blocks`]).
#[derive(Debug, sqlx::FromRow)]
pub struct RunRow {
    #[sqlx(flatten)]
    run: StoredRun,
    packed: Option<Vec<u8>>,
}

impl RunRow {
    /// Adds the runs of this row `test` lets through to `found`, newest first.
    fn runs_into(self, test: &RunTest<'_>, found: &mut Vec<StoredRun>) -> StoreResult<()> {
        let row = self.run.seq;
        match &self.packed {
            None => found.push(StoredRun {
                seq: run_blocks::run_seq(row, None),
                ..self.run
            }),
            Some(value) => {
                let runs = run_blocks::unpack(row, value)?;
                found.extend(
                    runs.iter()
                        .rev()
                        .filter(|p| test.admits(run_blocks::run_seq(row, Some(p.place)), &p.run))
                        .map(|p: &Packed<'_>| p.stored(row)),
                );
            }
        }
        Ok(())
    }
}

/// A block's row, read for its runs.
#[derive(Debug, sqlx::FromRow)]
pub struct BlockRow {
    seq: i64,
    packed: Vec<u8>,
}

/// A block some of whose runs pruning takes: `newer`, the runs of the rows after it.
#[derive(Debug, sqlx::FromRow)]
pub struct Straddling {
    seq: i64,
    packed: Vec<u8>,
    newer: i64,
}

/// How many runs one `INSERT` of rows writes: the runs a batch writes a row each are written in
/// the largest of these that fit, largest first, so the statements are a handful, each
/// prepared once and cached, whatever size the batches are (before, each odd-sized remainder
/// was a statement of its own, and filled the connection's statement cache). Not larger than
/// 64: the statement's values (12 a run) would then take fresh memory, and its page faults,
/// every batch.
pub(crate) const RUNS_STATEMENTS: [usize; 4] = [64, 16, 4, 1];

/// One statement of a batch of runs ([`runs_statements`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RunsStatement<'r, T> {
    /// Runs written a row each: the `INSERT` of [`RUNS_STATEMENTS`]`[size]` rows.
    Rows { size: usize, runs: &'r [T] },
    /// Plain runs written as one block ([`run_blocks`]), at most [`BLOCK_RUNS`].
    Block(&'r [T]),
}

/// `runs` split into statements, in their order: each stretch of plain runs (`shape` tells) as
/// blocks, each stretch of the others in the largest sizes of [`RUNS_STATEMENTS`] that fit.
pub(crate) fn runs_statements<T>(
    mut runs: &[T],
    shape: impl Fn(&T) -> RunShape,
) -> impl Iterator<Item = RunsStatement<'_, T>> {
    let mut stretch: &[T] = &[];
    let mut kind = RunShape::Full;
    std::iter::from_fn(move || {
        if stretch.is_empty() {
            kind = shape(runs.first()?);
            let len = runs
                .iter()
                .position(|run| shape(run) != kind)
                .unwrap_or(runs.len());
            (stretch, runs) = runs.split_at(len);
        }
        let taken = match kind {
            RunShape::Plain => stretch.len().min(BLOCK_RUNS),
            RunShape::Full => {
                RUNS_STATEMENTS[RUNS_STATEMENTS.iter().position(|&n| n <= stretch.len())?]
            }
        };
        let (chunk, rest) = stretch.split_at(taken);
        stretch = rest;
        Some(match kind {
            RunShape::Plain => RunsStatement::Block(chunk),
            RunShape::Full => RunsStatement::Rows {
                size: RUNS_STATEMENTS.iter().position(|&n| n == taken)?,
                runs: chunk,
            },
        })
    })
}

/// How a run is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunShape {
    /// A row of its own, every value bound ([`RUN_COLUMNS`]).
    Full,
    /// In a block with the other plain runs of its batch ([`run_blocks`]): it ended well, with
    /// nothing in its detail and no parent, as most runs do.
    Plain,
}

impl RunShape {
    /// The shape of `run`: [`RunShape::Plain`] when a block holds all it has.
    pub(crate) fn of(run: &NewRun<'_>) -> RunShape {
        if run.status == "ok" && run.problem.is_none() && run.parent.is_none() && run.detail == "{}"
        {
            RunShape::Plain
        } else {
            RunShape::Full
        }
    }
}

/// One value of a run's row ([`run_values`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunValue<'a> {
    /// `None`: SQL `NULL`.
    Text(Option<&'a str>),
    Int(i64),
}

/// The values of one run's row, in [`runs_insert`]'s order: what every way of writing a run
/// binds, the `n`th value to the statement's `n`th parameter of the row.
pub(crate) fn run_values<'a>(run: &NewRun<'a>) -> [RunValue<'a>; RUN_COLUMNS] {
    use RunValue::{Int, Text};
    [
        Text(Some(run.id)),
        Text(Some(run.door)),
        Text(Some(run.principal)),
        Text(Some(run.skill)),
        Int(run.started_ms),
        Int(run.duration_us),
        Text(Some(run.status)),
        Text(run.problem),
        Text(run.parent),
        Text(Some(run.args)),
        Text(run.result),
        Text(Some(run.detail)),
    ]
}

/// Adds the values of one run's row ([`run_values`]) to a statement's values.
fn add_run<'q, D>(values: &mut D::Arguments<'q>, run: &NewRun<'q>) -> Result<(), BoxDynError>
where
    D: Database,
    &'q str: Encode<'q, D> + Type<D>,
    i64: Encode<'q, D> + Type<D>,
    Option<&'q str>: Encode<'q, D> + Type<D>,
{
    for value in run_values(run) {
        match value {
            RunValue::Text(Some(text)) => values.add(text)?,
            RunValue::Text(None) => values.add(None::<&str>)?,
            RunValue::Int(n) => values.add(n)?,
        }
    }
    Ok(())
}

/// The values a run's row has ([`run_values`]).
pub(crate) const RUN_COLUMNS: usize = 12;

/// The `INSERT` of `rows` runs into `sg_runs`, a row each.
fn runs_insert<D: Dialect>(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO sg_runs (id, door, principal, skill, started_ms, duration_us, status, \
         problem, parent, args, result, detail) VALUES ",
    );
    let mut parameter = 0;
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..RUN_COLUMNS {
            if column > 0 {
                sql.push_str(", ");
            }
            parameter += 1;
            sql.push_str(&D::placeholder(parameter));
        }
        sql.push(')');
    }
    sql
}

/// The `INSERT` of a block's row, binding its first start, its value, how many runs and its
/// last start (in this order); the columns every row has are empty (a block's runs are all
/// `ok`, with nothing in their detail).
fn block_insert<D: Dialect>() -> String {
    let p = D::placeholder;
    format!(
        "INSERT INTO sg_runs (id, door, principal, skill, started_ms, duration_us, status, args, \
         detail, packed, packed_runs, started_last_ms) \
         VALUES ('', '', '', '', {}, 0, 'ok', '', '{{}}', {}, {}, {})",
        p(1),
        p(2),
        p(3),
        p(4)
    )
}

/// A row count for `LIMIT`: "no limit" (`usize::MAX`) is `i64::MAX`, not -1, which Postgres
/// refuses ("LIMIT must not be negative").
pub(crate) fn sql_limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each statement as (plain or not, the runs it writes).
    fn statements(runs: &[usize], shape: impl Fn(&usize) -> RunShape) -> Vec<(RunShape, &[usize])> {
        runs_statements(runs, shape)
            .map(|statement| match statement {
                RunsStatement::Rows { size, runs } => {
                    assert_eq!(runs.len(), RUNS_STATEMENTS[size], "rows of a cached size");
                    (RunShape::Full, runs)
                }
                RunsStatement::Block(runs) => (RunShape::Plain, runs),
            })
            .collect()
    }

    #[test]
    fn a_batch_of_runs_is_written_in_the_largest_cached_statements_that_fit_each_run_once() {
        for total in [0, 1, 3, 63, 64, 1000, 1024, 1025, 2500] {
            let runs: Vec<usize> = (0..total).collect();
            let chunks = statements(&runs, |_| RunShape::Full);
            let sizes: Vec<usize> = chunks.iter().map(|(_, c)| c.len()).collect();
            assert!(
                sizes.is_sorted_by(|a, b| a >= b),
                "largest first: {sizes:?}"
            );
            let written: Vec<usize> = chunks.iter().flat_map(|(_, c)| c.iter().copied()).collect();
            assert_eq!(written, runs, "every run once, in order");
            // Greedy: no statement of a size could have been one of the next size up.
            for (at, size) in sizes.iter().enumerate() {
                let left: usize = sizes[at..].iter().sum();
                let larger = RUNS_STATEMENTS.iter().rev().find(|&&n| n > *size);
                assert!(larger.is_none_or(|&n| left < n), "{total}: {sizes:?}");
            }
        }
        let full: Vec<usize> = (0..1024).collect();
        assert_eq!(
            statements(&full, |_| RunShape::Full).len(),
            1024 / RUNS_STATEMENTS[0],
            "a full batch is in statements of the largest size only"
        );
    }

    #[test]
    fn plain_runs_are_written_as_blocks_the_others_as_rows_and_the_batch_keeps_its_order() {
        // Every 10th run full among plain ones, a stretch of 100 full ones (305 to 404), and a
        // stretch of plain ones longer than a block holds.
        let plain_from = 1000;
        let total = plain_from + BLOCK_RUNS + 7;
        let shape = |n: &usize| {
            let full = n.is_multiple_of(10) || (305..405).contains(n) || *n == plain_from - 1;
            if *n < plain_from && full {
                RunShape::Full
            } else {
                RunShape::Plain
            }
        };
        let runs: Vec<usize> = (0..total).collect();
        let chunks = statements(&runs, shape);
        for (kind, chunk) in &chunks {
            assert!(
                chunk.iter().all(|n| shape(n) == *kind),
                "{chunk:?} is not all {kind:?}"
            );
        }
        let written: Vec<usize> = chunks.iter().flat_map(|(_, c)| c.iter().copied()).collect();
        assert_eq!(written, runs, "every run once, in order");
        let full_stretch: Vec<usize> = chunks
            .iter()
            .filter(|(_, c)| (305..405).contains(&c[0]))
            .map(|(_, c)| c.len())
            .collect();
        assert_eq!(
            full_stretch,
            [64, 16, 16, 4],
            "a stretch of full runs is chunked as a batch is"
        );
        let blocks: Vec<usize> = chunks
            .iter()
            .filter(|(kind, c)| *kind == RunShape::Plain && c[0] >= plain_from)
            .map(|(_, c)| c.len())
            .collect();
        assert_eq!(
            blocks,
            [BLOCK_RUNS, 7],
            "a stretch of plain runs is one block, or as many as it needs"
        );
        assert_eq!(
            chunks
                .iter()
                .filter(|(kind, c)| *kind == RunShape::Plain && c[0] < 305)
                .count(),
            31,
            "each stretch of plain runs between full ones is a block of its own"
        );
    }

    #[test]
    fn a_run_is_plain_when_it_ended_well_with_no_parent_and_nothing_in_its_detail() {
        let plain = NewRun {
            id: "r",
            door: "http",
            principal: "local",
            skill: "noop",
            started_ms: 1,
            duration_us: 2,
            status: "ok",
            problem: None,
            parent: None,
            args: "{}",
            result: Some("null"),
            detail: "{}",
        };
        assert_eq!(RunShape::of(&plain), RunShape::Plain);
        // Anything else a run's row may hold makes it full: a block does not hold it.
        for other in [
            NewRun {
                status: "failed",
                ..plain
            },
            NewRun {
                problem: Some("internal"),
                ..plain
            },
            NewRun {
                parent: Some("p"),
                ..plain
            },
            NewRun {
                detail: r#"{"trace":"t"}"#,
                ..plain
            },
        ] {
            assert_eq!(RunShape::of(&other), RunShape::Full, "{other:?}");
        }
        let sql = runs_insert::<sqlx::Postgres>(2);
        assert!(
            sql.ends_with("($13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)"),
            "{sql}"
        );
    }
}
