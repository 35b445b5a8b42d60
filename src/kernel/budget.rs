//! What one run may spend: skill invocations, bytes of args and results, and wall time, counted
//! across the whole tree of the run (every invocation below the root, and the handlers started by
//! events it emits while any part of it is still running). Depth bounds how deep a run goes;
//! this bounds how wide. A run over its budget fails with a clear error, and so does everything
//! it tries after that; other runs are not touched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ErrorKind, SkillError};

/// The limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    /// Skill invocations (middleware layers are not counted).
    pub invocations: u64,
    /// Bytes of args passed and results returned, summed over the run (JSON size).
    pub bytes: u64,
    /// From the root's start.
    pub wall: Duration,
}

impl Default for BudgetLimits {
    fn default() -> Self {
        BudgetLimits {
            invocations: 10_000,
            bytes: 64 * 1024 * 1024,
            wall: Duration::from_secs(15 * 60),
        }
    }
}

/// The spending of one run.
pub struct Budget {
    /// Made, and the budget listed where handlers find it, when the run first emits an event
    /// ([`Budgets::id_of`]): most runs emit none.
    id: OnceLock<u64>,
    limits: BudgetLimits,
    invocations: AtomicU64,
    bytes: AtomicU64,
    started: Instant,
    /// Once over, every later charge fails too, with the first error.
    over: OnceLock<SkillError>,
}

impl Budget {
    fn new(limits: BudgetLimits) -> Budget {
        Budget {
            id: OnceLock::new(),
            limits,
            invocations: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            started: Instant::now(),
            over: OnceLock::new(),
        }
    }

    /// The error the run went over its budget with, once it has.
    pub fn over(&self) -> Option<&SkillError> {
        self.over.get()
    }

    /// One invocation whose args are `args`.
    pub fn invocation(&self, args: &Value) -> Result<(), SkillError> {
        if let Some(err) = self.over.get() {
            return Err(err.clone());
        }
        let n = self.invocations.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.limits.invocations {
            return Err(self.exceeded(
                "invocations",
                format!("{} skill invocations", self.limits.invocations),
                "--max-run-invocations",
            ));
        }
        self.produced(args)
    }

    /// A value the run produced (args passed, a result returned).
    pub fn produced(&self, value: &Value) -> Result<(), SkillError> {
        if let Some(err) = self.over.get() {
            return Err(err.clone());
        }
        let size = json_size(value);
        let n = self.bytes.fetch_add(size, Ordering::Relaxed) + size;
        if n > self.limits.bytes {
            return Err(self.exceeded(
                "bytes",
                format!("{} bytes of args and results", self.limits.bytes),
                "--max-run-bytes",
            ));
        }
        if self.started.elapsed() > self.limits.wall {
            return Err(self.exceeded(
                "time",
                format!("{} s", self.limits.wall.as_secs()),
                "--max-run-time",
            ));
        }
        Ok(())
    }

    fn exceeded(&self, what: &str, limit: String, flag: &str) -> SkillError {
        let err = SkillError::new(
            ErrorKind::Failed,
            format!("the run went over its budget of {limit}; a skill that fans out without bound, or raise `{flag}`"),
        )
        .with_data(json!({
            "limit": "budget",
            "exceeded": what,
            "invocations": self.invocations.load(Ordering::Relaxed),
            "bytes": self.bytes.load(Ordering::Relaxed),
        }));
        self.over.get_or_init(|| err).clone()
    }
}

/// The budgets of the runs alive in this process, so a handler started by an event joins the
/// budget of the run that emitted it while any part of that run is still going.
pub struct Budgets {
    limits: BudgetLimits,
    live: Mutex<HashMap<u64, Weak<Budget>>>,
    /// Size of `live` after its last sweep: it is swept when it doubles.
    swept: AtomicU64,
}

impl Budgets {
    pub fn new(limits: BudgetLimits) -> Budgets {
        Budgets {
            limits,
            live: Mutex::default(),
            swept: AtomicU64::new(0),
        }
    }

    pub fn limits(&self) -> BudgetLimits {
        self.limits
    }

    /// The live budget `id` (from an event's envelope), else a new one for a new run.
    pub fn join_or_new(&self, id: Option<u64>) -> Arc<Budget> {
        if let Some(found) = id
            .and_then(|id| self.live.lock().get(&id).cloned())
            .and_then(|found| found.upgrade())
        {
            return found;
        }
        Arc::new(Budget::new(self.limits))
    }

    /// `budget`'s id, carried by the events its run emits so their handlers join it. Made on
    /// first use, when the budget is listed among the live ones: a run that emits no event
    /// takes no id and no lock.
    pub fn id_of(&self, budget: &Arc<Budget>) -> u64 {
        *budget.id.get_or_init(|| {
            let id = crate::context::id::next_id();
            let mut live = self.live.lock();
            live.insert(id, Arc::downgrade(budget));
            let swept = self.swept.load(Ordering::Relaxed);
            if live.len() as u64 > (2 * swept).max(1024) {
                live.retain(|_, b| b.strong_count() > 0);
                self.swept.store(live.len() as u64, Ordering::Relaxed);
            }
            id
        })
    }
}

/// About the size of `value` as JSON, without writing it out.
pub fn json_size(value: &Value) -> u64 {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() as u64 + 2,
        Value::Array(items) => 2 + items.iter().map(|v| json_size(v) + 1).sum::<u64>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() as u64 + 4 + json_size(v))
                .sum::<u64>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> BudgetLimits {
        BudgetLimits {
            invocations: 3,
            bytes: 1000,
            wall: Duration::from_secs(60),
        }
    }

    #[test]
    fn past_either_count_the_budget_fails_and_stays_failed() {
        let budgets = Budgets::new(small());
        let run = budgets.join_or_new(None);
        for _ in 0..3 {
            run.invocation(&json!({})).unwrap();
        }
        let err = run.invocation(&json!({})).unwrap_err();
        assert_eq!(err.data().unwrap()["exceeded"], "invocations");
        assert!(
            err.message().contains("3 skill invocations"),
            "{}",
            err.message()
        );
        // Spent: a small result fails too.
        assert!(run.produced(&json!(1)).is_err());

        let other = budgets.join_or_new(None);
        let big = json!({ "text": "x".repeat(2000) });
        let err = other.produced(&big).unwrap_err();
        assert_eq!(err.data().unwrap()["exceeded"], "bytes");
    }

    #[test]
    fn an_events_handler_joins_the_live_budget_of_the_run_that_emitted_it() {
        let budgets = Budgets::new(small());
        let run = budgets.join_or_new(None);
        assert!(budgets.live.lock().is_empty(), "listed when it first emits");
        let id = budgets.id_of(&run);
        assert_eq!(budgets.live.lock().len(), 1);
        assert_eq!(budgets.id_of(&run), id, "one id a budget");
        let joined = budgets.join_or_new(Some(id));
        assert!(Arc::ptr_eq(&run, &joined));
        drop((run, joined));
        // The run is over: a late handler starts a budget of its own.
        let late = budgets.join_or_new(Some(id));
        assert_ne!(budgets.id_of(&late), id);
    }

    #[test]
    fn json_size_is_close_to_the_written_length() {
        let value = json!({ "a": [1, "two", { "three": null }], "long": "x".repeat(100) });
        let written = serde_json::to_string(&value).unwrap().len() as u64;
        let size = json_size(&value);
        assert!(
            size >= written / 2 && size <= written * 2,
            "{size} vs {written}"
        );
    }
}
