//! Per-run taps: a callback registered for one run (by its root context's id), called with each
//! item the run produces (a log event, a bus event) as it is produced. A gateway streams a run's
//! logs and events through one: one map lookup an item, where every streaming run filtering
//! every item of the process cost streams times items, and a burst lagged them all.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// What a tap calls with each item of its run. It runs on the producer's thread, in the middle
/// of producing: it must not block (a gateway offers the item to its bounded reply queue).
pub type TapFn<T> = Arc<dyn Fn(&T) + Send + Sync>;

/// The taps of one kind of item, by run.
pub struct Taps<K, T> {
    by_run: Mutex<HashMap<K, (u64, TapFn<T>)>>,
    /// How many runs are tapped: producing costs nothing more while none is.
    tapped: AtomicUsize,
    next: AtomicU64,
}

impl<K, T> Taps<K, T>
where
    K: Eq + Hash + Clone,
{
    pub fn new() -> Arc<Taps<K, T>> {
        Arc::new(Taps {
            by_run: Mutex::new(HashMap::new()),
            tapped: AtomicUsize::new(0),
            next: AtomicU64::new(0),
        })
    }

    /// Calls `f` with each item of run `key` from now on, until the returned guard is dropped.
    /// A second tap on the same run replaces the first.
    pub fn tap(self: &Arc<Self>, key: K, f: TapFn<T>) -> Tap<K, T> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut by_run = self.by_run.lock();
        by_run.insert(key.clone(), (id, f));
        self.tapped.store(by_run.len(), Ordering::Release);
        Tap {
            taps: self.clone(),
            key,
            id,
        }
    }

    /// Hands `item` to the tap of run `key`, if it has one.
    pub fn deliver<Q>(&self, key: &Q, item: &T)
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        if !self.any() {
            return;
        }
        let f = self.by_run.lock().get(key).map(|(_, f)| f.clone());
        if let Some(f) = f {
            f(item);
        }
    }

    /// True while some run is tapped.
    pub fn any(&self) -> bool {
        self.tapped.load(Ordering::Acquire) > 0
    }
}

/// A run's tap; dropping it removes it.
pub struct Tap<K, T>
where
    K: Eq + Hash + Clone,
{
    taps: Arc<Taps<K, T>>,
    key: K,
    id: u64,
}

impl<K, T> Drop for Tap<K, T>
where
    K: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        let mut by_run = self.taps.by_run.lock();
        // Only its own: a tap that replaced it stays.
        if by_run.get(&self.key).is_some_and(|(id, _)| *id == self.id) {
            by_run.remove(&self.key);
        }
        self.taps.tapped.store(by_run.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(taps: &Arc<Taps<u64, u32>>, run: u64) -> (Tap<u64, u32>, Arc<Mutex<Vec<u32>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        (taps.tap(run, Arc::new(move |n| into.lock().push(*n))), seen)
    }

    #[test]
    fn a_tap_gets_its_runs_items_and_no_others_until_it_is_dropped() {
        let taps = Taps::new();
        let (tap, seen) = collect(&taps, 1);
        taps.deliver(&1, &10);
        taps.deliver(&2, &20);
        taps.deliver(&1, &11);
        drop(tap);
        taps.deliver(&1, &12);
        assert_eq!(*seen.lock(), [10, 11]);
        assert!(!taps.any());
    }

    #[test]
    fn dropping_a_replaced_tap_leaves_the_one_that_replaced_it() {
        let taps = Taps::new();
        let (first, _) = collect(&taps, 1);
        let (_second, seen) = collect(&taps, 1);
        drop(first);
        taps.deliver(&1, &5);
        assert_eq!(*seen.lock(), [5]);
    }
}
