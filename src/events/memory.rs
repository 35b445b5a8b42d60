//! The in-memory event store: everything in one process, gone when it exits.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::broadcast;

use crate::context::id::now_ms;
use crate::events::records::{
    Claim, KeyClaim, NewRun, Records, RunFilter, SessionEntry, StoredRun, StoredSchedule,
    StoredSubscription,
};
use crate::events::store::{Delivery, EventStore, Limits, StoreResult, distinct_topics};
use crate::events::{Event, dead_letter};

pub struct MemoryStore {
    inner: Mutex<Inner>,
    limits: Limits,
    wake: broadcast::Sender<String>,
}

#[derive(Default)]
struct Inner {
    seq: i64,
    /// The last receipt handed to a queue entry.
    receipts: u64,
    buffers: HashMap<String, VecDeque<(i64, Event)>>,
    queues: HashMap<(String, String), Queue>,
    /// key -> (fingerprint, expires_ms, response).
    claims: HashMap<String, (String, u64, Option<String>)>,
    schedules: std::collections::BTreeMap<String, StoredSchedule>,
    subscriptions: std::collections::BTreeMap<(String, String), String>,
    sessions: HashMap<String, VecDeque<SessionEntry>>,
    /// Recorded runs, oldest first, and the last `seq` given.
    runs: VecDeque<StoredRun>,
    run_seq: i64,
}

#[derive(Default)]
struct Queue {
    entries: BTreeMap<i64, Entry>,
    /// Receipt -> position, for ack and nack.
    by_receipt: HashMap<u64, i64>,
}

struct Entry {
    event: Event,
    attempts: u32,
    visible_ms: u64,
    receipt: u64,
}

impl MemoryStore {
    pub fn new(limits: Limits) -> MemoryStore {
        MemoryStore {
            inner: Mutex::new(Inner::default()),
            limits,
            wake: broadcast::channel(1024).0,
        }
    }

    /// `read` of the entries of `queue` of `topic` in queue order (nothing read when there
    /// is no such queue).
    fn entries<T: Default>(
        &self,
        topic: &str,
        queue: &str,
        read: impl FnOnce(&mut dyn Iterator<Item = &Entry>) -> T,
    ) -> T {
        let inner = self.inner.lock();
        let key = (topic.to_string(), queue.to_string());
        match inner.queues.get(&key) {
            Some(q) => read(&mut q.entries.values()),
            None => T::default(),
        }
    }
}

impl Inner {
    /// Claims `key` for `ttl` unless someone holds it (an expired claim is free again),
    /// recording `response` with it; else who holds it.
    fn claim(
        &mut self,
        key: &str,
        fingerprint: &str,
        ttl: Duration,
        response: Option<String>,
    ) -> KeyClaim {
        let now = now_ms();
        self.claims.retain(|_, (_, expires, _)| *expires > now);
        if let Some((fingerprint, _, response)) = self.claims.get(key) {
            return KeyClaim::Held {
                fingerprint: fingerprint.clone(),
                response: response.clone(),
            };
        }
        let expires = now + ttl.as_millis() as u64;
        self.claims.insert(
            key.to_string(),
            (fingerprint.to_string(), expires, response),
        );
        KeyClaim::Won
    }

    fn emit(&mut self, event: &Event, limits: &Limits) {
        self.seq += 1;
        let seq = self.seq;
        let buffer = self.buffers.entry(event.topic.clone()).or_default();
        buffer.push_back((seq, event.clone()));
        let cutoff = now_ms().saturating_sub(limits.buffer_age.as_millis() as u64);
        while buffer.len() > limits.buffer_events
            || buffer.front().is_some_and(|(_, e)| e.timestamp < cutoff)
        {
            buffer.pop_front();
        }
        let receipts = &mut self.receipts;
        for ((topic, _), queue) in self.queues.iter_mut() {
            if *topic == event.topic {
                *receipts += 1;
                queue.insert(seq, *receipts, event.clone());
            }
        }
    }
}

impl Queue {
    fn insert(&mut self, position: i64, receipt: u64, event: Event) {
        self.by_receipt.insert(receipt, position);
        self.entries.insert(
            position,
            Entry {
                event,
                attempts: 0,
                visible_ms: 0,
                receipt,
            },
        );
    }

    fn remove(&mut self, receipt: u64) -> Option<Entry> {
        let position = self.by_receipt.remove(&receipt)?;
        self.entries.remove(&position)
    }
}

#[async_trait]
impl EventStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn emit(&self, event: &Event) -> StoreResult<()> {
        self.inner.lock().emit(event, &self.limits);
        let _ = self.wake.send(event.topic.clone());
        Ok(())
    }

    async fn emit_many(&self, events: &[Event]) -> StoreResult<()> {
        {
            let mut inner = self.inner.lock();
            for event in events {
                inner.emit(event, &self.limits);
            }
        }
        for topic in distinct_topics(events) {
            let _ = self.wake.send(topic.to_string());
        }
        Ok(())
    }

    async fn emit_claimed(&self, claim: &Claim, events: &[Event]) -> StoreResult<KeyClaim> {
        {
            let mut inner = self.inner.lock();
            let got = inner.claim(
                &claim.key,
                &claim.fingerprint,
                claim.ttl,
                Some(claim.answer.clone()),
            );
            if got != KeyClaim::Won {
                return Ok(got);
            }
            for event in events {
                inner.emit(event, &self.limits);
            }
        }
        for topic in distinct_topics(events) {
            let _ = self.wake.send(topic.to_string());
        }
        Ok(KeyClaim::Won)
    }

    async fn create_queue(&self, topic: &str, queue: &str, replay: bool) -> StoreResult<bool> {
        let mut inner = self.inner.lock();
        let key = (topic.to_string(), queue.to_string());
        if inner.queues.contains_key(&key) {
            return Ok(false);
        }
        let mut q = Queue::default();
        let Inner {
            buffers, receipts, ..
        } = &mut *inner;
        if replay && let Some(buffer) = buffers.get(topic) {
            let cutoff = now_ms().saturating_sub(self.limits.buffer_age.as_millis() as u64);
            for (seq, event) in buffer.iter().filter(|(_, e)| e.timestamp >= cutoff) {
                *receipts += 1;
                q.insert(*seq, *receipts, event.clone());
            }
        }
        inner.queues.insert(key, q);
        drop(inner);
        if replay {
            let _ = self.wake.send(topic.to_string());
        }
        Ok(true)
    }

    async fn drop_queue(&self, topic: &str, queue: &str) -> StoreResult<bool> {
        let key = (topic.to_string(), queue.to_string());
        Ok(self.inner.lock().queues.remove(&key).is_some())
    }

    async fn queues(&self, topic: &str) -> StoreResult<Vec<String>> {
        let inner = self.inner.lock();
        let mut names: Vec<String> = inner
            .queues
            .keys()
            .filter(|(t, _)| t == topic)
            .map(|(_, n)| n.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    async fn topics_with_queue(&self, queue: &str) -> StoreResult<Vec<String>> {
        let inner = self.inner.lock();
        let mut topics: Vec<String> = inner
            .queues
            .keys()
            .filter(|(_, n)| n == queue)
            .map(|(t, _)| t.clone())
            .collect();
        topics.sort();
        Ok(topics)
    }

    async fn claim(
        &self,
        topic: &str,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<Delivery>> {
        let now = now_ms();
        let mut inner = self.inner.lock();
        let key = (topic.to_string(), queue.to_string());
        let mut dead = Vec::new();
        let mut out = Vec::new();
        if let Some(q) = inner.queues.get_mut(&key) {
            let mut expired = Vec::new();
            for (position, entry) in q.entries.iter_mut() {
                if out.len() >= max {
                    break;
                }
                if entry.visible_ms > now {
                    continue;
                }
                if entry.attempts >= self.limits.delivery_limit {
                    expired.push(*position);
                    continue;
                }
                entry.attempts += 1;
                entry.visible_ms = now + visibility.as_millis() as u64;
                out.push(Delivery {
                    event: entry.event.clone(),
                    attempts: entry.attempts,
                    receipt: entry.receipt,
                });
            }
            for position in expired {
                if let Some(entry) = q.entries.remove(&position) {
                    q.by_receipt.remove(&entry.receipt);
                    dead.push(dead_letter(&entry.event, queue, entry.attempts));
                }
            }
        }
        for letter in &dead {
            let key = (letter.topic.clone(), crate::events::DEAD_QUEUE.to_string());
            inner.queues.entry(key).or_default();
            inner.emit(letter, &self.limits);
        }
        drop(inner);
        for letter in dead {
            let _ = self.wake.send(letter.topic);
        }
        Ok(out)
    }

    async fn ack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
        let mut inner = self.inner.lock();
        let key = (topic.to_string(), queue.to_string());
        let Some(q) = inner.queues.get_mut(&key) else {
            return Ok(receipts.to_vec());
        };
        Ok(receipts
            .iter()
            .filter(|r| q.remove(**r).is_none())
            .copied()
            .collect())
    }

    async fn nack(&self, topic: &str, queue: &str, receipts: &[u64]) -> StoreResult<Vec<u64>> {
        let mut unknown = Vec::new();
        {
            let mut inner = self.inner.lock();
            let key = (topic.to_string(), queue.to_string());
            let Some(q) = inner.queues.get_mut(&key) else {
                return Ok(receipts.to_vec());
            };
            // Last first, so the first ends up at the very front.
            for receipt in receipts.iter().rev() {
                match q.remove(*receipt) {
                    Some(mut entry) => {
                        entry.visible_ms = 0;
                        let front = q.entries.keys().next().copied().unwrap_or(0) - 1;
                        q.by_receipt.insert(*receipt, front);
                        q.entries.insert(front, entry);
                    }
                    None => unknown.push(*receipt),
                }
            }
        }
        let _ = self.wake.send(topic.to_string());
        unknown.reverse();
        Ok(unknown)
    }

    async fn receipts(
        &self,
        topic: &str,
        queue: &str,
        ids: &[String],
    ) -> StoreResult<Vec<(String, u64)>> {
        Ok(self.entries(topic, queue, |entries| {
            entries
                .filter(|e| ids.contains(&e.event.id))
                .map(|e| (e.event.id.clone(), e.receipt))
                .collect()
        }))
    }

    async fn buffered(
        &self,
        topic: &str,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        let inner = self.inner.lock();
        let cutoff = now_ms().saturating_sub(self.limits.buffer_age.as_millis() as u64);
        let buffer: Vec<&Event> = inner
            .buffers
            .get(topic)
            .map(|b| {
                b.iter()
                    .map(|(_, e)| e)
                    .filter(|e| e.timestamp >= cutoff)
                    .collect()
            })
            .unwrap_or_default();
        let start = match after {
            Some(id) => buffer
                .iter()
                .position(|e| e.id == id)
                .map(|i| i + 1)
                .ok_or_else(|| {
                    crate::events::StoreError::Invalid(format!(
                        "event `{id}` is not in the buffer of `{topic}`"
                    ))
                })?,
            None => 0,
        };
        Ok(buffer
            .into_iter()
            .skip(start)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn peek(&self, topic: &str, queue: &str, limit: usize) -> StoreResult<Vec<Delivery>> {
        Ok(self.entries(topic, queue, |entries| {
            entries
                .take(limit)
                .map(|e| Delivery {
                    event: e.event.clone(),
                    attempts: e.attempts,
                    receipt: e.receipt,
                })
                .collect()
        }))
    }

    async fn enqueue(&self, topic: &str, queue: &str, event: &Event) -> StoreResult<()> {
        {
            let mut inner = self.inner.lock();
            inner.seq += 1;
            inner.receipts += 1;
            let (seq, receipt) = (inner.seq, inner.receipts);
            let key = (topic.to_string(), queue.to_string());
            inner
                .queues
                .entry(key)
                .or_default()
                .insert(seq, receipt, event.clone());
        }
        let _ = self.wake.send(topic.to_string());
        Ok(())
    }

    fn wakeups(&self) -> broadcast::Receiver<String> {
        self.wake.subscribe()
    }

    async fn ping(&self) -> StoreResult<()> {
        Ok(())
    }

    async fn migrate(&self) -> StoreResult<()> {
        Ok(())
    }
}

#[async_trait]
impl Records for MemoryStore {
    async fn claim_key(
        &self,
        key: &str,
        fingerprint: &str,
        ttl: Duration,
    ) -> StoreResult<KeyClaim> {
        Ok(self.inner.lock().claim(key, fingerprint, ttl, None))
    }

    async fn settle_key(&self, key: &str, response: &str, ttl: Duration) -> StoreResult<()> {
        let expires = now_ms() + ttl.as_millis() as u64;
        if let Some(claim) = self.inner.lock().claims.get_mut(key) {
            claim.1 = expires;
            claim.2 = Some(response.to_string());
        }
        Ok(())
    }

    async fn release_key(&self, key: &str) -> StoreResult<()> {
        self.inner.lock().claims.remove(key);
        Ok(())
    }

    async fn put_schedule(
        &self,
        name: &str,
        spec: &str,
        next_ms: Option<i64>,
    ) -> StoreResult<bool> {
        let mut inner = self.inner.lock();
        if inner.schedules.get(name).is_some_and(|s| s.spec == spec) {
            return Ok(false);
        }
        inner.schedules.insert(
            name.to_string(),
            StoredSchedule {
                name: name.to_string(),
                spec: spec.to_string(),
                next_ms,
                runs: 0,
            },
        );
        Ok(true)
    }

    async fn set_schedule_spec(&self, name: &str, spec: &str) -> StoreResult<bool> {
        let mut inner = self.inner.lock();
        let Some(schedule) = inner.schedules.get_mut(name) else {
            return Ok(false);
        };
        schedule.spec = spec.to_string();
        Ok(true)
    }

    async fn delete_schedule(&self, name: &str) -> StoreResult<bool> {
        Ok(self.inner.lock().schedules.remove(name).is_some())
    }

    async fn schedules(&self) -> StoreResult<Vec<StoredSchedule>> {
        Ok(self.inner.lock().schedules.values().cloned().collect())
    }

    async fn take_firing(
        &self,
        name: &str,
        due_ms: i64,
        next_ms: Option<i64>,
        ran: bool,
    ) -> StoreResult<bool> {
        let mut inner = self.inner.lock();
        match inner.schedules.get_mut(name) {
            Some(s) if s.next_ms == Some(due_ms) => {
                s.next_ms = next_ms;
                s.runs += i64::from(ran);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn session_append(
        &self,
        key: &str,
        at_ms: i64,
        entry: &str,
        keep: usize,
    ) -> StoreResult<()> {
        let mut inner = self.inner.lock();
        let list = inner.sessions.entry(key.to_string()).or_default();
        list.push_back(SessionEntry {
            at_ms,
            entry: entry.to_string(),
        });
        while list.len() > keep {
            list.pop_front();
        }
        Ok(())
    }

    async fn session_entries(&self, key: &str, limit: usize) -> StoreResult<Vec<SessionEntry>> {
        let inner = self.inner.lock();
        Ok(inner.sessions.get(key).map_or_else(Vec::new, |list| {
            list.iter()
                .skip(list.len().saturating_sub(limit))
                .cloned()
                .collect()
        }))
    }

    async fn session_clear(&self, key: &str) -> StoreResult<u64> {
        let removed = self.inner.lock().sessions.remove(key);
        Ok(removed.map_or(0, |l| l.len() as u64))
    }

    async fn put_subscription(&self, topic: &str, queue: &str, spec: &str) -> StoreResult<()> {
        self.inner
            .lock()
            .subscriptions
            .insert((topic.to_string(), queue.to_string()), spec.to_string());
        Ok(())
    }

    async fn delete_subscription(&self, topic: &str, queue: &str) -> StoreResult<bool> {
        Ok(self
            .inner
            .lock()
            .subscriptions
            .remove(&(topic.to_string(), queue.to_string()))
            .is_some())
    }

    async fn subscriptions(&self) -> StoreResult<Vec<StoredSubscription>> {
        Ok(self
            .inner
            .lock()
            .subscriptions
            .iter()
            .map(|((topic, queue), spec)| StoredSubscription {
                topic: topic.clone(),
                queue: queue.clone(),
                spec: spec.clone(),
            })
            .collect())
    }

    async fn put_runs(&self, runs: &[NewRun<'_>]) -> StoreResult<()> {
        let mut inner = self.inner.lock();
        for run in runs {
            inner.run_seq += 1;
            let seq = inner.run_seq;
            inner.runs.push_back(run.to_stored(seq));
        }
        Ok(())
    }

    async fn runs(&self, filter: &RunFilter) -> StoreResult<Vec<StoredRun>> {
        let test = filter.tester();
        Ok(self
            .inner
            .lock()
            .runs
            .iter()
            .rev()
            .filter(|run| test.matches(run))
            .take(filter.limit)
            .cloned()
            .collect())
    }

    async fn run(&self, id: &str) -> StoreResult<Option<StoredRun>> {
        Ok(self
            .inner
            .lock()
            .runs
            .iter()
            .find(|run| run.id == id)
            .cloned())
    }

    async fn prune_runs(&self, before_ms: i64, keep: usize) -> StoreResult<u64> {
        let mut inner = self.inner.lock();
        let before = inner.runs.len();
        inner.runs.retain(|run| run.started_ms >= before_ms);
        let over = inner.runs.len().saturating_sub(keep);
        inner.runs.drain(..over);
        Ok((before - inner.runs.len()) as u64)
    }
}
