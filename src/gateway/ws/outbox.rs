//! What a socket sends: a bounded queue of frames written by one writer task, and the close
//! that ends the socket with a code saying why. A client that reads too slowly for the queue
//! is closed (1013) instead of growing memory without bound.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;

/// Close codes (RFC 6455, section 7.4.1).
pub mod code {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const POLICY: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// The sending side of one socket. Cheap to share.
pub struct Outbox {
    tx: mpsc::Sender<Message>,
    /// The close to send, once decided (the first decision wins).
    close: Mutex<Option<(u16, String)>>,
    closed: CancellationToken,
}

impl Outbox {
    /// The outbox of `sink`, and the writer task's future (run it until it ends).
    pub fn new(
        sink: SplitSink<WebSocket, Message>,
        capacity: usize,
    ) -> (Arc<Outbox>, impl Future<Output = ()>) {
        let (tx, rx) = mpsc::channel(capacity);
        let outbox = Arc::new(Outbox {
            tx,
            close: Mutex::new(None),
            closed: CancellationToken::new(),
        });
        let writer = write(sink, rx, outbox.clone());
        (outbox, writer)
    }

    /// Queues a frame; a full queue closes the socket (the client fell behind).
    pub fn push(&self, frame: Value) {
        self.push_text(frame.to_string());
    }

    /// Queues a frame already serialized.
    pub fn push_text(&self, frame: String) {
        self.push_frame(frame.into());
    }

    /// Queues a frame already serialized (and maybe shared with other sockets).
    pub fn push_frame(&self, frame: Utf8Bytes) {
        match self.tx.try_send(Message::Text(frame)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.close(
                code::TRY_AGAIN_LATER,
                format!(
                    "the client fell behind: {} frames unread",
                    self.tx.max_capacity()
                ),
            ),
            Err(TrySendError::Closed(_)) => {}
        }
    }

    /// Ends the socket with `code` (frames already queued go first, unless the client fell
    /// behind).
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let mut close = self.close.lock();
        if close.is_none() {
            *close = Some((code, reason.into()));
        }
        self.closed.cancel();
    }

    /// Resolves once a close was decided.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Sends a ping (to find out whether the peer is still there).
    pub fn ping(&self) {
        let _ = self.tx.try_send(Message::Ping(Default::default()));
    }
}

/// The writer: frames in batches (one flush per batch), then the close frame.
async fn write(
    mut sink: SplitSink<WebSocket, Message>,
    mut rx: mpsc::Receiver<Message>,
    outbox: Arc<Outbox>,
) {
    loop {
        tokio::select! {
            biased;
            message = rx.recv() => {
                let Some(message) = message else { break };
                if sink.feed(message).await.is_err() {
                    return;
                }
                while let Ok(more) = rx.try_recv() {
                    if sink.feed(more).await.is_err() {
                        return;
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
            () = outbox.closed.cancelled() => break,
        }
    }
    let (code, reason) = outbox
        .close
        .lock()
        .clone()
        .unwrap_or((code::NORMAL, String::new()));
    if code != code::TRY_AGAIN_LATER {
        while let Ok(more) = rx.try_recv() {
            if sink.feed(more).await.is_err() {
                return;
            }
        }
    }
    // A close reason is at most 123 bytes.
    let mut reason = reason;
    while reason.len() > 123 {
        reason.pop();
    }
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
    let _ = sink.close().await;
}

/// The read half's type, for the connection loop.
pub type Incoming = futures::stream::SplitStream<WebSocket>;

/// Splits a socket into its read half and its outbox with the writer's future.
pub fn split(
    socket: WebSocket,
    capacity: usize,
) -> (Incoming, Arc<Outbox>, impl Future<Output = ()>) {
    let (sink, stream) = socket.split();
    let (outbox, writer) = Outbox::new(sink, capacity);
    (stream, outbox, writer)
}
