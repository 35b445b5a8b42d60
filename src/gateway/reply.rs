//! The reply channel: what a running skill sends back to the transport that started it.
//!
//! A [`Reply`] is the "raw response handle" of `nonlocals.request.res`: `web-send` writes a
//! status, headers and body chunks through it, `gateway-send` writes transport-neutral
//! messages, and the gateway adds the run's log events, bus events and, last, the outcome.
//! Each transport reads the other end ([`ReplyParts`]) and turns the parts into its own wire
//! format (an HTTP body or SSE stream, a Slack message, an email).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::error::{ErrorKind, Result, SkillError};
use crate::kernel::invoke::Output;

/// A result or message as markdown for a chat or a mail: text as is, nothing for null, anything
/// else as a JSON code block.
pub fn as_markdown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => format!(
            "```json\n{}\n```",
            serde_json::to_string_pretty(other).unwrap_or_default()
        ),
    }
}

/// One thing sent back over a transport.
#[derive(Debug)]
pub enum ReplyPart {
    /// `web-send` status and headers; at most one, before any chunk.
    Head {
        status: u16,
        headers: Vec<(String, String)>,
    },
    /// `web-send` body bytes (a string as is, anything else as JSON).
    Chunk(Value),
    /// `gateway-send`: a message for whoever is on the other end.
    Message(Value),
    /// `gateway-send` with `partial`: the next piece of an answer being written (a model's
    /// tokens). Transports that can edit a message show it growing (Slack); streams carry it as
    /// a `chunk`; a JSON answer leaves it out (the result holds the whole).
    Partial(String),
    /// A log event of the run.
    Log(Arc<Value>),
    /// A bus event emitted by the run (agent events, `event-emit`).
    Event(Value),
    /// At most this many log events, bus events or text pieces were left out because the
    /// client read more slowly than the run produced them (they are never slowed down for it).
    /// Comes before the next part that got through, so a stream never loses data silently.
    Gap(u64),
    /// The run ended: its result or its error. Always the last part.
    Done(Result<Output>),
}

/// What a run said, gathered for a door that answers once the run is over (a mail, a webhook
/// delivery's outcome): its messages, its partial answer, and how it ended.
#[derive(Debug, Default)]
pub struct Gathered {
    pub messages: Vec<Value>,
    /// The `partial` pieces, in order, joined.
    pub partial: String,
    /// `None`: the run ended without an outcome.
    pub outcome: Option<Result<Output>>,
}

/// Reads `parts` to the run's end, keeping what [`Gathered`] holds (logs, bus events and raw
/// `web-send` parts are not kept).
pub async fn gather(parts: &mut ReplyParts) -> Gathered {
    let mut gathered = Gathered::default();
    while let Some(part) = parts.recv().await {
        match part {
            ReplyPart::Message(message) => gathered.messages.push(message),
            ReplyPart::Partial(piece) => gathered.partial.push_str(&piece),
            ReplyPart::Done(done) => {
                gathered.outcome = Some(done);
                break;
            }
            ReplyPart::Head { .. }
            | ReplyPart::Chunk(_)
            | ReplyPart::Log(_)
            | ReplyPart::Event(_)
            | ReplyPart::Gap(_) => {}
        }
    }
    gathered
}

/// The sending side, stored on the root context at [`RESPONSE_PATH`].
#[derive(Debug)]
pub struct Reply {
    transport: &'static str,
    tx: mpsc::Sender<ReplyPart>,
    head_sent: AtomicBool,
    body_started: AtomicBool,
    /// The head declared the body's length and the body was sent whole.
    body_complete: AtomicBool,
    /// Parts [`Reply::offer`] left out since the last [`ReplyPart::Gap`] went out.
    missed: AtomicU64,
    /// What the client sends the run (`gateway-receive`), on transports that carry it.
    inbox: Option<tokio::sync::Mutex<mpsc::Receiver<Value>>>,
}

/// The sending side of a run's inbox: the transport puts the client's messages in it.
pub type Inbox = mpsc::Sender<Value>;

/// Client messages a run has not read yet, before the transport refuses more.
const INBOX_CAPACITY: usize = 16;

/// Where the raw response handle lives on a gateway run's context.
pub const RESPONSE_PATH: &str = "nonlocals.request.res";

/// How many parts may wait for a slow client before senders wait too.
const CAPACITY: usize = 64;

/// The receiving side, read by the transport.
pub type ReplyParts = mpsc::Receiver<ReplyPart>;

impl Reply {
    pub fn channel(transport: &'static str) -> (Arc<Reply>, ReplyParts) {
        let (reply, parts) = Reply::build(transport, None);
        (reply, parts)
    }

    /// A reply channel, and an inbox the transport fills with what the client sends the run.
    pub fn duplex(transport: &'static str) -> (Arc<Reply>, ReplyParts, Inbox) {
        let (inbox, received) = mpsc::channel(INBOX_CAPACITY);
        let (reply, parts) = Reply::build(transport, Some(received));
        (reply, parts, inbox)
    }

    fn build(
        transport: &'static str,
        inbox: Option<mpsc::Receiver<Value>>,
    ) -> (Arc<Reply>, ReplyParts) {
        let (tx, rx) = mpsc::channel(CAPACITY);
        let reply = Reply {
            transport,
            tx,
            head_sent: AtomicBool::new(false),
            body_started: AtomicBool::new(false),
            body_complete: AtomicBool::new(false),
            missed: AtomicU64::new(0),
            inbox: inbox.map(tokio::sync::Mutex::new),
        };
        (Arc::new(reply), rx)
    }

    /// The client's next message to the run, waiting up to `timeout` (`None` when none came).
    /// Fails on a transport that carries no messages to a run (a plain HTTP request).
    pub async fn receive(&self, timeout: std::time::Duration) -> Result<Option<Value>> {
        let Some(inbox) = &self.inbox else {
            // The caller's mistake when it named `gateway-receive` itself (a skill that calls
            // it over such a door is the server's).
            return Err(SkillError::new(
                ErrorKind::InvalidArgs,
                format!(
                    "`gateway-receive` needs a transport the client can keep talking on (WebSocket); this run came over {}",
                    self.transport
                ),
            ));
        };
        let mut inbox = inbox.lock().await;
        match tokio::time::timeout(timeout, inbox.recv()).await {
            Ok(Some(message)) => Ok(Some(message)),
            Ok(None) => Err(SkillError::failed(format!(
                "the {} client is gone: nothing more will arrive",
                self.transport
            ))),
            Err(_) => Ok(None),
        }
    }

    /// The transport this reply goes back over (`http`, `websocket`, `slack`, ...).
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// Sets the status and headers; refused once a head or a chunk went out.
    pub async fn head(&self, status: u16, headers: Vec<(String, String)>) -> Result<()> {
        if !(100..=999).contains(&status) {
            return Err(SkillError::failed(format!(
                "`status` must be an HTTP status code (100-999), got {status}"
            )));
        }
        if self.body_started.load(Ordering::Acquire) || self.head_sent.swap(true, Ordering::AcqRel)
        {
            return Err(SkillError::failed(
                "the response head was already sent (status and headers come before the body)",
            ));
        }
        self.send(ReplyPart::Head { status, headers }).await
    }

    /// Sends a body chunk (the head defaults to 200 if none was sent).
    pub async fn chunk(&self, chunk: Value) -> Result<()> {
        if self.body_complete.load(Ordering::Acquire) {
            return Err(SkillError::failed(
                "the response is complete: its head declared `content-length` and the whole body was sent",
            ));
        }
        self.body_started.store(true, Ordering::Release);
        self.send(ReplyPart::Chunk(chunk)).await
    }

    /// No chunk may follow: the body sent so far is the length the head declared.
    pub fn complete(&self) {
        self.body_complete.store(true, Ordering::Release);
    }

    /// True once `web-send` took over the response (a head or a chunk went out).
    pub fn is_raw(&self) -> bool {
        self.head_sent.load(Ordering::Acquire) || self.body_started.load(Ordering::Acquire)
    }

    /// Sends a part; fails when the other end is gone (the client disconnected).
    pub async fn send(&self, part: ReplyPart) -> Result<()> {
        let missed = self.missed.swap(0, Ordering::AcqRel);
        if missed > 0 {
            let _ = self.tx.send(ReplyPart::Gap(missed)).await;
        }
        self.tx.send(part).await.map_err(|_| {
            SkillError::failed(format!(
                "the {} client is gone: nothing more can be sent",
                self.transport
            ))
        })
    }

    /// Sends a part without waiting (log and event feeds, text pieces: they must never slow the
    /// run down). When the client is behind, the part is left out and counted; a
    /// [`ReplyPart::Gap`] saying how many goes before the next part that gets through.
    pub fn offer(&self, part: ReplyPart) {
        let missed = self.missed.load(Ordering::Acquire);
        if missed > 0 {
            match self.tx.try_send(ReplyPart::Gap(missed)) {
                Ok(()) => {
                    self.missed.fetch_sub(missed, Ordering::AcqRel);
                }
                Err(TrySendError::Full(_)) => {
                    self.missed.fetch_add(1, Ordering::AcqRel);
                    return;
                }
                Err(TrySendError::Closed(_)) => return,
            }
        }
        if let Err(TrySendError::Full(_)) = self.tx.try_send(part) {
            self.missed.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Ends the reply with `outcome` without waiting (a fresh channel has room): for a run
    /// refused before it started.
    pub fn offer_done(&self, outcome: Result<Output>) -> bool {
        self.tx.try_send(ReplyPart::Done(outcome)).is_ok()
    }

    /// Parts left out and not yet told to the client (see [`ReplyPart::Gap`]).
    pub fn missed(&self) -> u64 {
        self.missed.load(Ordering::Acquire)
    }
}

/// A body chunk as bytes on the wire: a string as is, anything else as JSON.
pub fn chunk_bytes(chunk: Value) -> Bytes {
    match chunk {
        Value::String(s) => Bytes::from(s),
        other => Bytes::from(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn gather_keeps_messages_and_partial_pieces_in_order_and_ends_at_the_outcome() {
        let (reply, mut parts) = Reply::channel("test");
        reply.offer(ReplyPart::Log(Arc::new(Value::from("noise"))));
        reply
            .send(ReplyPart::Message(Value::from("one")))
            .await
            .unwrap();
        reply.offer(ReplyPart::Partial("Hel".into()));
        reply.offer(ReplyPart::Partial("lo".into()));
        reply
            .send(ReplyPart::Message(Value::from("two")))
            .await
            .unwrap();
        assert!(reply.offer_done(Ok(Some(Arc::new(Value::from("done"))))));
        // Nothing after the outcome is read.
        reply.offer(ReplyPart::Message(Value::from("late")));
        let gathered = gather(&mut parts).await;
        assert_eq!(gathered.messages, [Value::from("one"), Value::from("two")]);
        assert_eq!(gathered.partial, "Hello");
        let outcome = gathered.outcome.expect("an outcome").expect("ok");
        assert_eq!(outcome.as_deref(), Some(&Value::from("done")));
        assert_eq!(parts.recv().await.map(|_| "late"), Some("late"));
    }

    #[tokio::test]
    async fn gather_of_a_run_that_ended_without_an_outcome_has_none() {
        let (reply, mut parts) = Reply::channel("test");
        reply
            .send(ReplyPart::Message(Value::from("said")))
            .await
            .unwrap();
        drop(reply);
        let gathered = gather(&mut parts).await;
        assert_eq!(gathered.messages, [Value::from("said")]);
        assert!(gathered.outcome.is_none());
    }
}
