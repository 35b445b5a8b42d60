//! Group commit for emits, and throttling of dead-letter sweeps.
//!
//! Group commit: concurrent emits are written by one task in one statement, and each
//! emitter is answered only after that statement committed, so "committed before emit returns"
//! holds while many emitters share one commit.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use crate::events::Event;
use crate::events::store::{StoreError, StoreResult};

/// Most events written in one statement (a larger `emit_many` is still written whole).
const MAX_BATCH: usize = 512;

type Reply = oneshot::Sender<Result<(), String>>;
type Insert = Arc<dyn Fn(Vec<Event>) -> BoxFuture<'static, StoreResult<()>> + Send + Sync>;

/// Hands emits to the writer task and waits for their commit.
pub struct Batcher {
    queue: mpsc::Sender<(Vec<Event>, Reply)>,
}

impl Batcher {
    /// Starts `writers` writer tasks; `insert` writes a batch in one transaction. With more
    /// than one, a batch is written while the next one waits for its commit: concurrent emits
    /// are not ordered among themselves anyway, and one emitter's next emit only starts after
    /// its last one committed.
    pub fn spawn(insert: Insert, writers: usize) -> Batcher {
        let (queue, inbox) = mpsc::channel::<(Vec<Event>, Reply)>(4096);
        let inbox = Arc::new(tokio::sync::Mutex::new(inbox));
        for _ in 0..writers.max(1) {
            let (inbox, insert) = (inbox.clone(), insert.clone());
            tokio::spawn(async move {
                let mut replies = Vec::new();
                loop {
                    let mut events = {
                        let mut inbox = inbox.lock().await;
                        let Some((mut events, reply)) = inbox.recv().await else {
                            return;
                        };
                        replies.push(reply);
                        while events.len() < MAX_BATCH {
                            match inbox.try_recv() {
                                Ok((more, reply)) => {
                                    events.extend(more);
                                    replies.push(reply);
                                }
                                Err(_) => break,
                            }
                        }
                        events
                    };
                    let outcome = insert(std::mem::take(&mut events))
                        .await
                        .map_err(|e| e.to_string());
                    for reply in replies.drain(..) {
                        let _ = reply.send(outcome.clone());
                    }
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
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((events, reply))
            .await
            .map_err(|_| StoreError::Write("the event writer has stopped".into()))?;
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(StoreError::Write(message)),
            Err(_) => Err(StoreError::Write("the event writer has stopped".into())),
        }
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
