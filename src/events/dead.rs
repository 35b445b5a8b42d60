//! Dead letters of every queue, read across topics (`GET /dead`, `skillgate dead list`), and
//! replayed: the event that used up its deliveries goes back into the queue it died in, as a
//! fresh entry, and its letter is removed (`POST /dead/{id}/replay`, `skillgate dead replay`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::context::id::iso;
use crate::events::store::{EventStore, StoreResult};
use crate::events::{DEAD_QUEUE, Event};

/// Suffix of the topic a topic's dead letters go to.
const DEAD_TOPIC: &str = ".dead";

/// One dead letter: an event that used up its deliveries in a queue.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// The letter's own id (what replay names).
    pub id: String,
    /// The topic and queue the event died in.
    pub topic: String,
    pub queue: String,
    pub attempts: u64,
    /// When it died (ms since the epoch).
    pub died_ms: u64,
    /// The event that died, as it was emitted.
    pub event: Value,
    /// The letter's topic (`<topic>.dead`) and receipt in its queue.
    letter_topic: String,
    receipt: u64,
}

impl DeadLetter {
    fn read(letter_topic: &str, delivery: &crate::events::store::Delivery) -> DeadLetter {
        let data = delivery.event.data.clone().unwrap_or(Value::Null);
        DeadLetter {
            id: delivery.event.id.clone(),
            topic: letter_topic
                .strip_suffix(DEAD_TOPIC)
                .unwrap_or(letter_topic)
                .to_string(),
            queue: data["queue"].as_str().unwrap_or_default().to_string(),
            attempts: data["attempts"].as_u64().unwrap_or(0),
            died_ms: delivery.event.timestamp,
            event: data.get("event").cloned().unwrap_or(Value::Null),
            letter_topic: letter_topic.to_string(),
            receipt: delivery.receipt,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "topic": self.topic,
            "queue": self.queue,
            "attempts": self.attempts,
            "died": iso(self.died_ms as i64),
            "event": self.event,
        })
    }
}

/// The dead letters of every topic, oldest first within a topic, at most `limit`.
pub async fn list(store: &Arc<dyn EventStore>, limit: usize) -> StoreResult<Vec<DeadLetter>> {
    let mut letters = Vec::new();
    for letter_topic in store.topics_with_queue(DEAD_QUEUE).await? {
        if !letter_topic.ends_with(DEAD_TOPIC) || letters.len() >= limit {
            continue;
        }
        let room = limit - letters.len();
        for delivery in store.peek(&letter_topic, DEAD_QUEUE, room).await? {
            letters.push(DeadLetter::read(&letter_topic, &delivery));
        }
    }
    Ok(letters)
}

/// Why a dead letter could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no dead letter `{0}`")]
    Missing(String),
    #[error("dead letter `{0}` does not name its queue and event")]
    Unreadable(String),
    #[error(transparent)]
    Store(#[from] crate::events::store::StoreError),
}

/// Puts the event of dead letter `id` back into its queue and removes the letter; the letter
/// as it was.
pub async fn replay(store: &Arc<dyn EventStore>, id: &str) -> Result<DeadLetter, ReplayError> {
    for letter_topic in store.topics_with_queue(DEAD_QUEUE).await? {
        if !letter_topic.ends_with(DEAD_TOPIC) {
            continue;
        }
        let found = store
            .receipts(&letter_topic, DEAD_QUEUE, &[id.to_string()])
            .await?;
        let Some((_, receipt)) = found.into_iter().next() else {
            continue;
        };
        let letters = store.peek(&letter_topic, DEAD_QUEUE, usize::MAX).await?;
        let Some(delivery) = letters.iter().find(|d| d.receipt == receipt) else {
            continue;
        };
        let letter = DeadLetter::read(&letter_topic, delivery);
        requeue(store, &letter).await?;
        return Ok(letter);
    }
    Err(ReplayError::Missing(id.to_string()))
}

/// Puts `letter`'s event back into its queue and removes the letter.
pub async fn requeue(store: &Arc<dyn EventStore>, letter: &DeadLetter) -> Result<(), ReplayError> {
    let original = serde_json::from_value::<Event>(letter.event.clone()).ok();
    let (false, Some(original)) = (letter.queue.is_empty(), original) else {
        return Err(ReplayError::Unreadable(letter.id.clone()));
    };
    store
        .enqueue(&letter.topic, &letter.queue, &original)
        .await?;
    store
        .ack(
            &letter.letter_topic,
            DEAD_QUEUE,
            std::slice::from_ref(&letter.receipt),
        )
        .await?;
    Ok(())
}

/// The dead letters of one topic (`skillgate events dead <topic>`).
pub async fn of_topic(store: &Arc<dyn EventStore>, topic: &str) -> StoreResult<Vec<DeadLetter>> {
    let letter_topic = format!("{topic}{DEAD_TOPIC}");
    Ok(store
        .peek(&letter_topic, DEAD_QUEUE, usize::MAX)
        .await?
        .iter()
        .map(|d| DeadLetter::read(&letter_topic, d))
        .collect())
}
