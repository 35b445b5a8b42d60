//! [`Record`]: what a test's skill saw, in order, that the test waits on as it grows (woken by
//! each push, not by polling), with a guard against a rule that never holds.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Notify;

/// Generous bound on a wait that only ends if the rule under test holds (a hang guard, not a
/// timing check).
const GUARD: Duration = Duration::from_secs(30);

#[derive(Clone, Default)]
pub struct Record {
    items: Arc<Mutex<Vec<Value>>>,
    grew: Arc<Notify>,
}

impl Record {
    pub fn push(&self, item: Value) {
        self.items.lock().push(item);
        self.grew.notify_waiters();
    }

    pub fn all(&self) -> Vec<Value> {
        self.items.lock().clone()
    }

    /// Everything recorded once there are at least `n` items; fails the test after the guard.
    pub async fn at_least(&self, n: usize) -> Vec<Value> {
        self.until(|items| items.len() >= n).await
    }

    /// Everything recorded once `done` holds of it; fails the test after the guard.
    pub async fn until(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let wait = woken_until(&self.grew, || {
            let items = self.all();
            done(&items).then_some(items)
        });
        match tokio::time::timeout(GUARD, wait).await {
            Ok(items) => items,
            Err(_) => panic!("what was recorded never held: {:?}", self.all()),
        }
    }
}

/// What `look` finds, looking now and again each time `notify` wakes its waiters (registered
/// before each look, so a wakeup in between is not missed). Callers bound the wait.
pub async fn woken_until<T>(notify: &Notify, mut look: impl FnMut() -> Option<T>) -> T {
    loop {
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if let Some(found) = look() {
            return found;
        }
        woken.await;
    }
}
