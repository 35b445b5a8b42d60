//! Schedules that do not fire, and why: the runner records each once (and logs it once, not at
//! every tick), `/readyz` shows them, and a schedule is let go when it fires again or is gone.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde_json::{Value, json};

/// What keeps each held schedule from firing (a kernel extension while `serve` runs).
#[derive(Default)]
pub struct ScheduleHealth {
    held: Mutex<BTreeMap<String, Held>>,
}

/// Why a schedule does not fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Its skill is not among the current skills (deleted, or renamed): paused until it is back.
    SkillMissing(String),
    /// Its stored spec cannot be read.
    Unreadable,
}

impl Held {
    /// Why, in words (for `/readyz` and `schedule-list`).
    pub fn reason(&self) -> String {
        match self {
            Held::SkillMissing(skill) => {
                format!("skill `{skill}` not found: paused until it is back")
            }
            Held::Unreadable => "its stored spec cannot be read; the cause is in the log".into(),
        }
    }
}

impl ScheduleHealth {
    /// Records that `name` is held for `why`; true when that is news (then log it).
    pub fn hold(&self, name: &str, why: Held) -> bool {
        self.held.lock().insert(name.to_string(), why.clone()) != Some(why)
    }

    /// `name` fires again; true when it was held (then log that it resumed).
    pub fn release(&self, name: &str) -> bool {
        self.held.lock().remove(name).is_some()
    }

    /// Forgets held schedules that are no longer stored.
    pub fn retain(&self, stored: &std::collections::BTreeSet<&str>) {
        self.held
            .lock()
            .retain(|name, _| stored.contains(name.as_str()));
    }

    /// For `/readyz`: every held schedule with its reason (names only, no paths).
    pub fn to_json(&self) -> Value {
        let held: Vec<Value> = self
            .held
            .lock()
            .iter()
            .map(|(name, why)| json!({ "name": name, "reason": why.reason() }))
            .collect();
        json!({ "held": held })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_news_once_per_reason_until_released() {
        let health = ScheduleHealth::default();
        assert!(health.hold("nightly", Held::SkillMissing("report".into())));
        assert!(!health.hold("nightly", Held::SkillMissing("report".into())));
        assert!(
            health.hold("nightly", Held::Unreadable),
            "a new reason is news"
        );
        assert!(health.release("nightly"));
        assert!(!health.release("nightly"));
        assert!(
            health.hold("nightly", Held::Unreadable),
            "held again after a release"
        );
        health.retain(&std::collections::BTreeSet::new());
        assert_eq!(health.to_json(), json!({ "held": [] }));
    }
}
