//! Group commit for emits, and throttling of dead-letter sweeps.
//!
//! Group commit: concurrent emits are written by one task in one statement, and each
//! emitter is answered only after that statement committed, so "committed before emit returns"
//! holds while many emitters share one commit. An emit may depend on a claim (a door's intake:
//! "queue this delivery once"): the claim, its answer and the events are written in the same
//! commit, and the events only when the claim is won.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use crate::events::Event;
use crate::events::records::{Claim, KeyClaim};
use crate::events::store::{StoreError, StoreResult};

/// Most events written in one statement (a larger `emit_many` is still written whole).
const MAX_BATCH: usize = 512;

/// One emitter's part of a batch: its events, and the claim they depend on, if any.
pub struct Item {
    pub events: Vec<Event>,
    pub claim: Option<Claim>,
}

type Reply = oneshot::Sender<Result<KeyClaim, String>>;

/// Writes a batch in one transaction: each claim tried in order (no two of a batch share a
/// key), the events of the items whose claim was won or that have none, and what became of
/// each claimed item's claim (by index in the batch; an item without one is not listed).
pub type Insert = Arc<
    dyn Fn(Vec<Item>) -> BoxFuture<'static, StoreResult<HashMap<usize, KeyClaim>>> + Send + Sync,
>;

/// The claimed items of a batch, by index, sorted by key (concurrent batches then take rows
/// in one order).
pub fn claims_of(items: &[Item]) -> Vec<(usize, &Claim)> {
    let mut claims: Vec<(usize, &Claim)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| item.claim.as_ref().map(|c| (i, c)))
        .collect();
    claims.sort_by(|a, b| a.1.key.cmp(&b.1.key));
    claims
}

/// The events of `items` to write once their claims are decided (`claimed`, by index): those
/// of items with no claim or a won one, in batch order.
pub fn events_to_write(items: Vec<Item>, claimed: &HashMap<usize, KeyClaim>) -> Vec<Event> {
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| claimed.get(i).is_none_or(|c| *c == KeyClaim::Won))
        .flat_map(|(_, item)| item.events)
        .collect()
}

/// Hands emits to the writer task and waits for their commit.
pub struct Batcher {
    queue: mpsc::Sender<(Item, Reply)>,
}

impl Batcher {
    /// Starts `writers` writer tasks; `insert` writes a batch in one transaction. With more
    /// than one, a batch is written while the next one waits for its commit: concurrent emits
    /// are not ordered among themselves anyway, and one emitter's next emit only starts after
    /// its last one committed.
    pub fn spawn(insert: Insert, writers: usize) -> Batcher {
        Batcher::spawn_on(&tokio::runtime::Handle::current(), insert, writers)
    }

    /// As [`Batcher::spawn`], with the writer tasks on `runtime`.
    pub fn spawn_on(runtime: &tokio::runtime::Handle, insert: Insert, writers: usize) -> Batcher {
        let (queue, inbox) = mpsc::channel::<(Item, Reply)>(4096);
        let inbox = Arc::new(tokio::sync::Mutex::new(inbox));
        for _ in 0..writers.max(1) {
            let (inbox, insert) = (inbox.clone(), insert.clone());
            runtime.spawn(async move {
                loop {
                    let batch = {
                        let mut inbox = inbox.lock().await;
                        let Some(first) = inbox.recv().await else {
                            return;
                        };
                        let mut events = first.0.events.len();
                        let mut batch = vec![first];
                        while events < MAX_BATCH {
                            match inbox.try_recv() {
                                Ok(more) => {
                                    events += more.0.events.len();
                                    batch.push(more);
                                }
                                Err(_) => break,
                            }
                        }
                        batch
                    };
                    write(&insert, batch).await;
                }
            });
        }
        Batcher { queue }
    }

    /// Writes `events` (one or more, in order); returns once their batch committed.
    pub async fn emit(&self, events: Vec<Event>) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.send(Item {
            events,
            claim: None,
        })
        .await
        .map(|_| ())
    }

    /// Claims `claim.key` and, if it is won, writes `events` and the claim's answer in the same
    /// commit; a held key writes nothing. Returns once the batch committed.
    pub async fn emit_claimed(&self, claim: Claim, events: Vec<Event>) -> StoreResult<KeyClaim> {
        self.send(Item {
            events,
            claim: Some(claim),
        })
        .await
    }

    async fn send(&self, item: Item) -> StoreResult<KeyClaim> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((item, reply))
            .await
            .map_err(|_| StoreError::Write("the event writer has stopped".into()))?;
        match answer.await {
            Ok(Ok(claim)) => Ok(claim),
            Ok(Err(message)) => Err(StoreError::Write(message)),
            Err(_) => Err(StoreError::Write("the event writer has stopped".into())),
        }
    }
}

/// Writes one batch and answers each of its emitters. A key claimed twice in one batch is
/// tried once, by its first item; a later item is answered as the holder of the first would
/// answer it.
async fn write(insert: &Insert, batch: Vec<(Item, Reply)>) {
    let mut firsts: HashMap<String, usize> = HashMap::new();
    // Per emitter: its reply, the index in `items` of the item written for it, and, when that
    // is another emitter's item (the same key claimed again), the first one's fingerprint and
    // answer.
    let mut answers = Vec::with_capacity(batch.len());
    let mut items: Vec<Item> = Vec::with_capacity(batch.len());
    for (item, reply) in batch {
        let first = item
            .claim
            .as_ref()
            .and_then(|c| firsts.get(&c.key).copied());
        match first {
            Some(first) => {
                let claim = items[first].claim.as_ref().expect("a claimed first item");
                let told = (claim.fingerprint.clone(), claim.answer.clone());
                answers.push((reply, first, Some(told)));
            }
            None => {
                if let Some(claim) = &item.claim {
                    firsts.insert(claim.key.clone(), items.len());
                }
                answers.push((reply, items.len(), None));
                items.push(item);
            }
        }
    }
    let outcome = insert(items).await.map_err(|e| e.to_string());
    for (reply, index, again) in answers {
        let answer = match &outcome {
            Err(message) => Err(message.clone()),
            Ok(done) => match (done.get(&index).cloned().unwrap_or(KeyClaim::Won), again) {
                // The same key again: the first item holds it now, with its answer.
                (KeyClaim::Won, Some((fingerprint, answer))) => Ok(KeyClaim::Held {
                    fingerprint,
                    response: Some(answer),
                }),
                (got, _) => Ok(got),
            },
        };
        let _ = reply.send(answer);
    }
}

/// At most one dead-letter sweep per queue per interval (sweeps cost a transaction, and idle
/// consumers would otherwise sweep on every poll).
#[derive(Default)]
pub struct Throttle {
    last: parking_lot::Mutex<std::collections::HashMap<(String, String), std::time::Instant>>,
}

impl Throttle {
    const EVERY: std::time::Duration = std::time::Duration::from_millis(500);

    /// True (and recorded) when `queue` of `topic` has not been swept for a while.
    pub fn due(&self, topic: &str, queue: &str) -> bool {
        let now = std::time::Instant::now();
        let mut last = self.last.lock();
        let key = (topic.to_string(), queue.to_string());
        match last.get(&key) {
            Some(at) if now.duration_since(*at) < Self::EVERY => false,
            _ => {
                last.insert(key, now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use parking_lot::Mutex;

    use super::*;

    /// What the writer was given: each item's claimed key and its count of events.
    type Written = Arc<Mutex<Vec<(Option<String>, usize)>>>;

    fn claim(key: &str, fingerprint: &str) -> Claim {
        Claim {
            key: key.into(),
            fingerprint: fingerprint.into(),
            ttl: Duration::from_secs(60),
            answer: format!("answer-{fingerprint}"),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_key_claimed_twice_in_one_batch_is_tried_once_and_the_second_is_told_the_firsts_answer()
     {
        // The writer claims every key it is given and keeps what it wrote.
        let written: Written = Arc::default();
        let seen = written.clone();
        let insert: Insert = Arc::new(move |items: Vec<Item>| {
            let claimed: HashMap<usize, KeyClaim> = claims_of(&items)
                .into_iter()
                .map(|(i, _)| (i, KeyClaim::Won))
                .collect();
            seen.lock().extend(
                items
                    .iter()
                    .map(|i| (i.claim.as_ref().map(|c| c.key.clone()), i.events.len())),
            );
            Box::pin(async move { Ok(claimed) })
        });
        let batcher = Arc::new(Batcher::spawn(insert, 1));
        // Both queued before the writer task runs (this thread runs it only when they wait),
        // so they share a batch.
        let sends: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|fp| {
                let batcher = batcher.clone();
                tokio::spawn(async move {
                    let event = Event::new("orders", "test");
                    batcher.emit_claimed(claim("k", fp), vec![event]).await
                })
            })
            .collect();
        let mut got = Vec::new();
        for send in sends {
            got.push(send.await.unwrap().unwrap());
        }
        assert_eq!(
            got,
            [
                KeyClaim::Won,
                KeyClaim::Held {
                    fingerprint: "a".into(),
                    response: Some("answer-a".into()),
                },
            ]
        );
        assert_eq!(
            *written.lock(),
            [(Some("k".to_string()), 1)],
            "one claim, one event"
        );
    }
}
