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
    KeyClaim, NewRun, Records, RunFilter, SessionEntry, StoredRun, StoredSchedule,
    StoredSubscription,
};
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

    /// The `INSERT` of [`RUNS_STATEMENTS`]`[size]` runs of `shape`, each made once.
    fn runs_insert_of(shape: RunShape, size: usize) -> &'static str;
}

impl Dialect for sqlx::Sqlite {
    fn rows_affected(result: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn placeholder(_: usize) -> String {
        "?".into()
    }

    fn runs_insert_of(shape: RunShape, size: usize) -> &'static str {
        static SQL: RunsInserts =
            [const { [const { OnceLock::new() }; RUNS_STATEMENTS.len()] }; RunShape::COUNT];
        cached_runs_insert::<Self>(&SQL, shape, size)
    }
}

impl Dialect for sqlx::Postgres {
    fn rows_affected(result: &sqlx::postgres::PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn placeholder(n: usize) -> String {
        format!("${n}")
    }

    fn runs_insert_of(shape: RunShape, size: usize) -> &'static str {
        static SQL: RunsInserts =
            [const { [const { OnceLock::new() }; RUNS_STATEMENTS.len()] }; RunShape::COUNT];
        cached_runs_insert::<Self>(&SQL, shape, size)
    }
}

/// The `INSERT`s of runs of one database, made once: by shape, then by size. Each database
/// keeps its own (a `static` in a generic function would be one for all of them).
type RunsInserts = [[OnceLock<String>; RUNS_STATEMENTS.len()]; RunShape::COUNT];

/// The `INSERT` of [`RUNS_STATEMENTS`]`[size]` runs of `shape`, from `cache` (made there at
/// its first use).
fn cached_runs_insert<D: Dialect>(
    cache: &'static RunsInserts,
    shape: RunShape,
    size: usize,
) -> &'static str {
    cache[shape as usize][size].get_or_init(|| runs_insert::<D>(shape, RUNS_STATEMENTS[size]))
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
        for (shape, size, chunk) in runs_statements(runs, RunShape::of) {
            // Room for every value at once: a statement's values grown by doubling take fresh
            // memory (and its page faults) several times a batch.
            let mut values = <S::Db as Database>::Arguments::default();
            values.reserve(
                chunk.len() * RUN_COLUMNS,
                chunk.iter().map(NewRun::text_bytes).sum(),
            );
            for run in chunk {
                add_run(&mut values, shape, run).map_err(sqlx::Error::Encode)?;
            }
            sqlx::query_with(S::Db::runs_insert_of(shape, size), values)
                .execute(&mut *tx)
                .await?;
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
        if fields
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
        Ok(sqlx::query_as::<_, StoredRun>(
            "SELECT seq, id, door, principal, skill, started_ms, duration_us, status, problem,
                 parent, args, result, detail FROM sg_runs
             WHERE ($1 IS NULL OR door = $1) AND ($2 IS NULL OR skill = $2)
               AND ($3 IS NULL OR status = $3) AND ($4 IS NULL OR principal = $4)
               AND ($5 IS NULL OR started_ms >= $5) AND ($6 IS NULL OR started_ms < $6)
               AND ($7 IS NULL OR seq < $7)
               AND ($8 IS NULL OR LOWER(args) LIKE $8 ESCAPE '\\'
                    OR LOWER(result) LIKE $8 ESCAPE '\\')
             ORDER BY seq DESC LIMIT $9",
        )
        .bind(filter.door.as_deref())
        .bind(filter.skill.as_deref())
        .bind(filter.status.as_deref())
        .bind(filter.principal.as_deref())
        .bind(filter.since_ms)
        .bind(filter.until_ms)
        .bind(filter.before)
        .bind(text.as_deref())
        .bind(sql_limit(filter.limit))
        .fetch_all(&self.records().pool)
        .await?)
    }

    async fn run(&self, id: &str) -> StoreResult<Option<StoredRun>> {
        Ok(sqlx::query_as::<_, StoredRun>(
            "SELECT seq, id, door, principal, skill, started_ms, duration_us, status, problem,
                 parent, args, result, detail FROM sg_runs WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.records().pool)
        .await?)
    }

    async fn prune_runs(&self, before_ms: i64, keep: usize) -> StoreResult<u64> {
        // Past the newest `keep`: the `seq` of the first run not kept (none while there are
        // fewer, and `<=` against nothing is never true).
        let pruned = sqlx::query(
            "DELETE FROM sg_runs WHERE started_ms < $1
                OR seq <= (SELECT seq FROM sg_runs ORDER BY seq DESC LIMIT 1 OFFSET $2)",
        )
        .bind(before_ms)
        .bind(sql_limit(keep))
        .execute(&self.records().pool)
        .await?;
        Ok(S::Db::rows_affected(&pruned))
    }
}

/// How many runs one `INSERT` writes: a batch is written in the largest of these that fit,
/// largest first, so the statements are a handful, each prepared once and cached, whatever
/// size the batches are (before, each odd-sized remainder was a statement of its own, and
/// filled the connection's statement cache). Not larger than 64: one statement of a whole
/// batch costs the database less, but a server that records measured more CPU a request with
/// it, since the statement's values (12 a run) then take fresh memory, and its page faults,
/// every batch.
pub(crate) const RUNS_STATEMENTS: [usize; 4] = [64, 16, 4, 1];

/// `runs` split into statements of [`RUNS_STATEMENTS`], in their order: each stretch of runs of
/// one [`RunShape`] (`shape` tells) in the largest sizes that fit, each chunk with its shape and
/// its size's index.
pub(crate) fn runs_statements<T>(
    mut runs: &[T],
    shape: impl Fn(&T) -> RunShape,
) -> impl Iterator<Item = (RunShape, usize, &[T])> {
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
        let size = RUNS_STATEMENTS.iter().position(|&n| n <= stretch.len())?;
        let (chunk, rest) = stretch.split_at(RUNS_STATEMENTS[size]);
        stretch = rest;
        Some((kind, size, chunk))
    })
}

/// Which of a run's values an `INSERT` binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunShape {
    /// All of them ([`RUN_COLUMNS`]).
    Full = 0,
    /// Those of a run that ended well, with nothing in its detail and no parent, as most runs
    /// do: its status, problem, parent and detail are written into the statement
    /// ([`PLAIN_COLUMNS`]), so a row binds 8 values rather than 12 (binding a value is about a
    /// third of what SQLite spends writing it, callgrind).
    Plain = 1,
}

/// The columns of [`run_values`] whose value a plain run's statement holds, with that value.
const PLAIN_COLUMNS: [(usize, &str); 4] = [(6, "'ok'"), (7, "NULL"), (8, "NULL"), (11, "'{}'")];

impl RunShape {
    /// How many shapes there are (each indexes its statements by `shape as usize`).
    pub(crate) const COUNT: usize = 2;

    /// The shape of `run`'s row: [`RunShape::Plain`] when its values are those of
    /// [`PLAIN_COLUMNS`].
    pub(crate) fn of(run: &NewRun<'_>) -> RunShape {
        if run.status == "ok" && run.problem.is_none() && run.parent.is_none() && run.detail == "{}"
        {
            RunShape::Plain
        } else {
            RunShape::Full
        }
    }

    /// The columns of [`run_values`] a row of this shape binds, in order.
    pub(crate) fn bound(self) -> &'static [usize] {
        match self {
            RunShape::Full => &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            RunShape::Plain => &[0, 1, 2, 3, 4, 5, 9, 10],
        }
    }

    /// What a statement of this shape holds of the `column`th value: its literal, or `None`
    /// for a parameter.
    fn literal(self, column: usize) -> Option<&'static str> {
        match self {
            RunShape::Full => None,
            RunShape::Plain => PLAIN_COLUMNS
                .iter()
                .find(|(c, _)| *c == column)
                .map(|(_, literal)| *literal),
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

/// Adds the values of one run's row ([`run_values`]) that a statement of `shape` binds to its
/// values.
fn add_run<'q, D>(
    values: &mut D::Arguments<'q>,
    shape: RunShape,
    run: &NewRun<'q>,
) -> Result<(), BoxDynError>
where
    D: Database,
    &'q str: Encode<'q, D> + Type<D>,
    i64: Encode<'q, D> + Type<D>,
    Option<&'q str>: Encode<'q, D> + Type<D>,
{
    let row = run_values(run);
    for &column in shape.bound() {
        match row[column] {
            RunValue::Text(Some(text)) => values.add(text)?,
            RunValue::Text(None) => values.add(None::<&str>)?,
            RunValue::Int(n) => values.add(n)?,
        }
    }
    Ok(())
}

/// The values a run's row has ([`run_values`]).
pub(crate) const RUN_COLUMNS: usize = 12;

/// The `INSERT` of `rows` runs of `shape` into `sg_runs`.
fn runs_insert<D: Dialect>(shape: RunShape, rows: usize) -> String {
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
            match shape.literal(column) {
                Some(literal) => sql.push_str(literal),
                None => {
                    parameter += 1;
                    sql.push_str(&D::placeholder(parameter));
                }
            }
        }
        sql.push(')');
    }
    sql
}

/// A row count for `LIMIT`: "no limit" (`usize::MAX`) is `i64::MAX`, not -1, which Postgres
/// refuses ("LIMIT must not be negative").
pub(crate) fn sql_limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_runs_is_written_in_the_largest_cached_statements_that_fit_each_run_once() {
        for total in [0, 1, 3, 63, 64, 1000, 1024, 1025, 2500] {
            let runs: Vec<usize> = (0..total).collect();
            let chunks: Vec<(RunShape, usize, &[usize])> =
                runs_statements(&runs, |_| RunShape::Plain).collect();
            let sizes: Vec<usize> = chunks
                .iter()
                .map(|(_, size, _)| RUNS_STATEMENTS[*size])
                .collect();
            assert!(
                chunks
                    .iter()
                    .all(|(_, size, chunk)| chunk.len() == RUNS_STATEMENTS[*size]),
                "each statement is one of the cached sizes, {total} runs: {sizes:?}"
            );
            assert!(
                sizes.is_sorted_by(|a, b| a >= b),
                "largest first: {sizes:?}"
            );
            let written: Vec<usize> = chunks
                .iter()
                .flat_map(|(_, _, c)| c.iter().copied())
                .collect();
            assert_eq!(written, runs, "every run once, in order");
            // Greedy: no statement of a size could have been one of the next size up.
            for (at, (_, size, _)) in chunks.iter().enumerate() {
                let left: usize = chunks[at..].iter().map(|(_, _, c)| c.len()).sum();
                assert!(
                    *size == 0 || left < RUNS_STATEMENTS[size - 1],
                    "{total}: {sizes:?}"
                );
            }
        }
        let full: Vec<usize> = (0..1024).collect();
        assert_eq!(
            runs_statements(&full, |_| RunShape::Full).count(),
            1024 / RUNS_STATEMENTS[0],
            "a full batch is in statements of the largest size only"
        );
    }

    #[test]
    fn each_statement_holds_runs_of_one_shape_and_the_batch_keeps_its_order() {
        // Every 10th run full among plain ones, and a stretch of 100 full ones (305 to 404).
        let shape = |n: &usize| {
            if n.is_multiple_of(10) || (305..405).contains(n) {
                RunShape::Full
            } else {
                RunShape::Plain
            }
        };
        let runs: Vec<usize> = (0..1000).collect();
        let chunks: Vec<(RunShape, usize, &[usize])> = runs_statements(&runs, shape).collect();
        for (kind, size, chunk) in &chunks {
            assert_eq!(chunk.len(), RUNS_STATEMENTS[*size]);
            assert!(
                chunk.iter().all(|n| shape(n) == *kind),
                "{chunk:?} is not all {kind:?}"
            );
        }
        let written: Vec<usize> = chunks
            .iter()
            .flat_map(|(_, _, c)| c.iter().copied())
            .collect();
        assert_eq!(written, runs, "every run once, in order");
        let full_stretch: Vec<usize> = chunks
            .iter()
            .filter(|(_, _, c)| (305..405).contains(&c[0]))
            .map(|(_, size, _)| RUNS_STATEMENTS[*size])
            .collect();
        assert_eq!(
            full_stretch,
            [64, 16, 16, 4],
            "a stretch of one shape is chunked as a batch is"
        );
    }

    #[test]
    fn a_plain_runs_statement_holds_the_values_a_plain_run_has_and_binds_the_others() {
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
        for (column, value) in run_values(&plain).into_iter().enumerate() {
            let bound = RunShape::Plain.bound().contains(&column);
            match RunShape::Plain.literal(column) {
                Some(literal) => {
                    assert!(!bound, "column {column} is both bound and written in");
                    let held = match value {
                        RunValue::Text(Some(text)) => format!("'{text}'"),
                        RunValue::Text(None) => "NULL".into(),
                        RunValue::Int(n) => n.to_string(),
                    };
                    assert_eq!(held, literal, "column {column}");
                }
                None => assert!(bound, "column {column} is neither bound nor written in"),
            }
        }
        assert_eq!(RunShape::Full.bound().len(), RUN_COLUMNS);
        // Anything else a run's row may hold makes it full.
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
        let sql = runs_insert::<sqlx::Postgres>(RunShape::Plain, 2);
        assert!(
            sql.ends_with("($9, $10, $11, $12, $13, $14, 'ok', NULL, NULL, $15, $16, '{}')"),
            "{sql}"
        );
    }
}
