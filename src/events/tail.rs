//! Following a topic live from its durable replay buffer, with resume: [`Bus::follow`] hands out
//! every event of a topic after a given event id (from the buffer), then every new one, in buffer
//! order, with no gap and no duplicate, whichever process emitted them.
//!
//! One [`Tail`] per topic and process reads the store's buffer when the store signals the topic
//! (or every poll interval), and broadcasts what it read to every follower of the topic, so a
//! thousand followers cost one read per wakeup, not a thousand. A follower subscribes to its
//! tail before reading its history, and skips the live events its history already held.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorKind, Result, SkillError};
use crate::events::store::{EventStore, WAKE_ALL};
use crate::events::{Bus, Event, check_name, store_error};

/// Events a slow follower may fall behind its tail before it is told it lagged.
const FOLLOWER_CAPACITY: usize = 4096;
/// How often a tail re-reads without a wakeup (a store without notifications, a lost one).
const POLL: Duration = Duration::from_millis(250);
/// Events read from the buffer at once.
const PAGE: usize = 500;

/// An event read off a topic's buffer, with its envelope serialized once for every follower.
#[derive(Debug)]
pub struct Tailed {
    pub event: Event,
    /// `event` as JSON text.
    pub json: String,
    /// What the first follower made of the event for its transport ([`Tailed::rendered`]).
    rendered: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl Tailed {
    fn new(event: Event) -> Tailed {
        let json = event.to_body();
        Tailed {
            event,
            json,
            rendered: OnceLock::new(),
        }
    }

    /// The event rendered by `render`, once for all the followers that share this event (a
    /// transport's frame, built for the first socket and cloned for the others). A follower
    /// asking for another type than the first gets its own rendering.
    pub fn rendered<T: Any + Clone + Send + Sync>(&self, render: impl FnOnce(&Tailed) -> T) -> T {
        if let Some(kept) = self.rendered.get() {
            return match kept.downcast_ref::<T>() {
                Some(value) => value.clone(),
                None => render(self),
            };
        }
        let value = render(self);
        let _ = self.rendered.set(Box::new(value.clone()));
        value
    }
}

/// What a tail broadcasts.
#[derive(Debug, Clone)]
enum Item {
    Event(Arc<Tailed>),
    /// The tail lost its place: events fell out of the buffer before it read them.
    Gap,
}

/// Every topic being followed in this process.
#[derive(Default)]
pub(crate) struct Tails(Mutex<HashMap<String, Weak<Tail>>>);

/// The reader of one topic's buffer.
struct Tail {
    tx: broadcast::Sender<Item>,
    stop: CancellationToken,
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One follower of a topic: [`Follow::next`] gives its events in order.
pub struct Follow {
    /// Buffered events after the resume point, not yet handed out.
    history: std::collections::VecDeque<Arc<Tailed>>,
    /// Ids that were in the buffer when following started: handed out from history or before
    /// the resume point, skipped when the tail broadcasts them.
    seen: HashSet<String>,
    rx: broadcast::Receiver<Item>,
    /// Keeps the tail running while someone follows.
    _tail: Arc<Tail>,
    /// True when the resume point was not in the buffer any more (history starts at the
    /// oldest buffered event instead).
    pub resumed_with_gap: bool,
}

/// Why a follower cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowError {
    /// The follower read too slowly and events passed it by.
    #[error("fell {0} events behind the topic")]
    Lagged(u64),
    /// The tail lost its place in the buffer (more events than the buffer holds arrived
    /// between two reads): events may be missing.
    #[error("events left the buffer before they were read")]
    Gap,
    /// The bus is shutting down.
    #[error("the event bus is shutting down")]
    Closed,
}

/// Where a follower starts.
enum Start<'a> {
    /// After the newest buffered event.
    New,
    /// At the oldest buffered event.
    Oldest,
    /// After this event.
    After(&'a str),
}

impl Bus {
    /// Follows `topic`: every buffered event after the event `from` (none: only new events),
    /// then every new one. A `from` that is no longer in the buffer starts at the oldest
    /// buffered event and sets [`Follow::resumed_with_gap`].
    pub async fn follow(&self, topic: &str, from: Option<&str>) -> Result<Follow> {
        self.follow_at(topic, from.map_or(Start::New, Start::After))
            .await
    }

    /// Follows `topic` from the oldest event in its buffer.
    pub async fn follow_buffer(&self, topic: &str) -> Result<Follow> {
        self.follow_at(topic, Start::Oldest).await
    }

    async fn follow_at(&self, topic: &str, from: Start<'_>) -> Result<Follow> {
        check_name("topic", topic)?;
        let tail = self.tail(topic).await?;
        let rx = tail.tx.subscribe();
        // The whole buffer: its ids are skipped when the tail (which may be in the middle of
        // a read) broadcasts them, so nothing up to `from` and nothing in the history comes
        // twice.
        let all = self
            .store
            .buffered(topic, None, usize::MAX)
            .await
            .map_err(store_error)?;
        let (start, resumed_with_gap) = match from {
            Start::New => (all.len(), false),
            Start::Oldest => (0, false),
            Start::After(id) => match all.iter().position(|e| e.id == id) {
                Some(at) => (at + 1, false),
                None => (0, true),
            },
        };
        let seen = all.iter().map(|e| e.id.clone()).collect();
        let history = all
            .into_iter()
            .skip(start)
            .map(|e| Arc::new(Tailed::new(e)))
            .collect();
        Ok(Follow {
            seen,
            history,
            rx,
            _tail: tail,
            resumed_with_gap,
        })
    }

    /// The tail of `topic`, started if nobody follows it yet.
    async fn tail(&self, topic: &str) -> Result<Arc<Tail>> {
        if let Some(tail) = self.tails.0.lock().get(topic).and_then(Weak::upgrade) {
            return Ok(tail);
        }
        // Start after the newest buffered event: followers read older ones themselves.
        let last = self
            .store
            .buffered(topic, None, usize::MAX)
            .await
            .map_err(store_error)?
            .pop()
            .map(|e| e.id);
        let mut tails = self.tails.0.lock();
        if let Some(tail) = tails.get(topic).and_then(Weak::upgrade) {
            return Ok(tail);
        }
        tails.retain(|_, t| t.strong_count() > 0);
        let tail = Arc::new(Tail {
            tx: broadcast::channel(FOLLOWER_CAPACITY).0,
            stop: self.stop.child_token(),
        });
        tails.insert(topic.to_string(), Arc::downgrade(&tail));
        tokio::spawn(read(
            self.store.clone(),
            topic.to_string(),
            last,
            tail.tx.clone(),
            tail.stop.clone(),
        ));
        Ok(tail)
    }
}

/// The tail's loop: read what is new after `last` whenever the topic may have changed.
async fn read(
    store: Arc<dyn EventStore>,
    topic: String,
    mut last: Option<String>,
    tx: broadcast::Sender<Item>,
    stop: CancellationToken,
) {
    let mut wakeups = store.wakeups();
    loop {
        loop {
            let page = match store.buffered(&topic, last.as_deref(), PAGE).await {
                Ok(page) => page,
                Err(crate::events::StoreError::Invalid(_)) => {
                    // `last` left the buffer: start again from its newest event.
                    let _ = tx.send(Item::Gap);
                    last = match store.buffered(&topic, None, usize::MAX).await {
                        Ok(mut all) => all.pop().map(|e| e.id),
                        Err(_) => last,
                    };
                    break;
                }
                Err(err) => {
                    tracing::warn!(topic, error = %err, "reading a topic's buffer failed; retrying");
                    break;
                }
            };
            let full = page.len() == PAGE;
            for event in page {
                last = Some(event.id.clone());
                let _ = tx.send(Item::Event(Arc::new(Tailed::new(event))));
            }
            if !full {
                break;
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(POLL) => {}
            woke = wakeups.recv() => match woke {
                Ok(t) if t == topic || t == WAKE_ALL => {}
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => tokio::time::sleep(POLL).await,
            },
        }
    }
}

impl Follow {
    /// The next event, waiting for one.
    pub async fn next(&mut self) -> std::result::Result<Arc<Tailed>, FollowError> {
        if let Some(event) = self.history.pop_front() {
            return Ok(event);
        }
        loop {
            match self.rx.recv().await {
                Ok(Item::Event(event)) => {
                    if !self.seen.is_empty() && self.seen.remove(&event.event.id) {
                        continue;
                    }
                    // Past the overlap with the history: nothing more to skip.
                    self.seen.clear();
                    return Ok(event);
                }
                Ok(Item::Gap) => return Err(FollowError::Gap),
                Err(RecvError::Lagged(n)) => return Err(FollowError::Lagged(n)),
                Err(RecvError::Closed) => return Err(FollowError::Closed),
            }
        }
    }
}

impl From<FollowError> for SkillError {
    fn from(err: FollowError) -> SkillError {
        SkillError::new(ErrorKind::Failed, err.to_string())
    }
}
