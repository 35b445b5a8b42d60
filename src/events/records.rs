//! The records a store keeps beside its topics and queues: claimed keys, schedules, handler
//! subscriptions, session histories and the runs record; the trait every store implements for
//! them, and the types it speaks.

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

/// A claim an emit depends on ([`EventStore::emit_claimed`](crate::events::EventStore::emit_claimed)):
/// its events are stored only if `key` is won, and the claim is then held for `ttl` with
/// `answer` recorded, all in the events' commit.
#[derive(Debug, Clone)]
pub struct Claim {
    pub key: String,
    /// Tells the request the key was claimed for from another one with the same key.
    pub fingerprint: String,
    pub ttl: Duration,
    /// What a later request with the same key is told.
    pub answer: String,
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

/// A root run as the store keeps it: the fields runs are listed by, and JSON text the store
/// does not read (`args`, `result`, `detail`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredRun {
    /// Its place in the record, given by the store (the cursor of a listing); ignored when
    /// written.
    pub seq: i64,
    /// The root context id.
    pub id: String,
    pub door: String,
    pub principal: String,
    pub skill: String,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    pub duration_us: i64,
    /// `ok`, `failed`, `aborted`, `timed-out` or `refused`.
    pub status: String,
    /// The problem type's slug, for a run that did not end well.
    pub problem: Option<String>,
    /// The run that started this one (a retry's original).
    pub parent: Option<String>,
    pub args: String,
    pub result: Option<String>,
    pub detail: String,
}

/// A run to be recorded ([`Records::put_runs`]): a [`StoredRun`]'s fields, borrowed from
/// wherever the run waits to be written (the store gives it its `seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewRun<'a> {
    pub id: &'a str,
    pub door: &'a str,
    pub principal: &'a str,
    pub skill: &'a str,
    pub started_ms: i64,
    pub duration_us: i64,
    pub status: &'a str,
    pub problem: Option<&'a str>,
    pub parent: Option<&'a str>,
    pub args: &'a str,
    pub result: Option<&'a str>,
    pub detail: &'a str,
}

impl NewRun<'_> {
    /// Bytes of the row's text.
    pub fn text_bytes(&self) -> usize {
        [
            self.id,
            self.door,
            self.principal,
            self.skill,
            self.status,
            self.args,
            self.detail,
        ]
        .iter()
        .map(|t| t.len())
        .sum::<usize>()
            + [self.problem, self.parent, self.result]
                .iter()
                .map(|t| t.map_or(0, str::len))
                .sum::<usize>()
    }

    /// This run as the store keeps it, at `seq`.
    pub fn to_stored(&self, seq: i64) -> StoredRun {
        StoredRun {
            seq,
            id: self.id.to_string(),
            door: self.door.to_string(),
            principal: self.principal.to_string(),
            skill: self.skill.to_string(),
            started_ms: self.started_ms,
            duration_us: self.duration_us,
            status: self.status.to_string(),
            problem: self.problem.map(str::to_string),
            parent: self.parent.map(str::to_string),
            args: self.args.to_string(),
            result: self.result.map(str::to_string),
            detail: self.detail.to_string(),
        }
    }
}

impl StoredRun {
    /// This run, to be written again (its `seq` left to the store).
    pub fn as_new(&self) -> NewRun<'_> {
        NewRun {
            id: &self.id,
            door: &self.door,
            principal: &self.principal,
            skill: &self.skill,
            started_ms: self.started_ms,
            duration_us: self.duration_us,
            status: &self.status,
            problem: self.problem.as_deref(),
            parent: self.parent.as_deref(),
            args: &self.args,
            result: self.result.as_deref(),
            detail: &self.detail,
        }
    }
}

/// Which runs [`Records::runs`] lists, newest first: every field that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub door: Option<String>,
    pub skill: Option<String>,
    pub status: Option<String>,
    pub principal: Option<String>,
    /// Started at or after (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Started before (ms since the epoch).
    pub until_ms: Option<i64>,
    /// Text found in the args or the result, in any case.
    pub text: Option<String>,
    /// Only runs recorded before this `seq` (the cursor of the next page).
    pub before: Option<i64>,
    /// At most this many.
    pub limit: usize,
}

impl RunFilter {
    /// This filter made ready to test many runs: its text lowercased once, not for each run.
    pub fn tester(&self) -> RunTest<'_> {
        RunTest {
            filter: self,
            text: self.text.as_deref().map(str::to_lowercase),
        }
    }
}

/// A [`RunFilter`] testing runs one by one (the memory store's filter, a block's runs on the SQL
/// stores, and the meaning the SQL one has).
#[derive(Debug)]
pub struct RunTest<'a> {
    filter: &'a RunFilter,
    /// The filter's text, lowercased.
    text: Option<String>,
}

impl RunTest<'_> {
    /// Whether `run` passes every condition but the limit.
    pub fn matches(&self, run: &StoredRun) -> bool {
        self.admits(run.seq, &run.as_new())
    }

    /// Whether the run `run`, at `seq`, passes every condition but the limit.
    pub fn admits(&self, seq: i64, run: &NewRun<'_>) -> bool {
        let filter = self.filter;
        let same = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        same(&filter.door, run.door)
            && same(&filter.skill, run.skill)
            && same(&filter.status, run.status)
            && same(&filter.principal, run.principal)
            && filter.since_ms.is_none_or(|t| run.started_ms >= t)
            && filter.until_ms.is_none_or(|t| run.started_ms < t)
            && filter.before.is_none_or(|b| seq < b)
            && self.text.as_deref().is_none_or(|t| {
                run.args.to_lowercase().contains(t)
                    || run.result.is_some_and(|r| r.to_lowercase().contains(t))
            })
    }
}

/// Claimed keys, schedules, subscriptions, sessions and runs: what every store keeps beside its
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

    /// Records `runs` (a batch, in one write).
    async fn put_runs(&self, runs: &[NewRun<'_>]) -> StoreResult<()>;

    /// The runtime [`Records::put_runs`] is best called on (the SQLite store writes the batch
    /// on the thread that calls it: its own writer thread), or `None` for any.
    fn runs_runtime(&self) -> Option<tokio::runtime::Handle> {
        None
    }

    /// The runs `filter` lets through, newest first.
    async fn runs(&self, filter: &RunFilter) -> StoreResult<Vec<StoredRun>>;

    /// Run `id`, if it is recorded.
    async fn run(&self, id: &str) -> StoreResult<Option<StoredRun>>;

    /// Forgets the runs that started before `before_ms`, then all but the newest `keep` of the
    /// others (a run past the age does not take the place of one that is not). Returns how many
    /// went.
    async fn prune_runs(&self, before_ms: i64, keep: usize) -> StoreResult<u64>;
}
