//! What a socket sends: a queue of frames bounded in frames and bytes (its own, and every
//! socket's together) written by one writer task, and the close that ends the socket with a
//! code saying why. A frame counts until it has reached the socket (flushed), not only while
//! it waits in the queue: one taken by the writer but stuck in the WebSocket's buffer behind a
//! client that does not read still holds its memory. A client that reads too slowly for the
//! queue, or takes nothing for the write timeout, is let go (1013) and what waited for it is
//! freed, instead of growing memory without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use prometheus_client::metrics::gauge::Gauge;
use std::time::Duration;

use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use crate::gateway::ws::upgrade::Socket;
use futures::{Sink, SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;

/// Close codes (RFC 6455, section 7.4.1).
pub mod code {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const PROTOCOL: u16 = 1002;
    pub const POLICY: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// How much may wait for a socket: frames and bytes of its own, and the bytes of every socket
/// together.
#[derive(Clone)]
pub struct Limits {
    pub frames: usize,
    pub bytes: usize,
    pub total_bytes: usize,
    /// Bytes queued to every socket of the server now.
    pub total: Gauge<i64, AtomicI64>,
    /// How long one write may wait for the client to take it before the client is let go.
    pub write_timeout: Duration,
}

/// The sending side of one socket. Cheap to share.
pub struct Outbox {
    tx: mpsc::Sender<(Message, usize)>,
    /// The close to send, once decided (the first decision wins).
    close: Mutex<Option<(u16, String)>>,
    closed: CancellationToken,
    /// Cancelled when the client is let go without its queued frames (it fell behind).
    abandoned: CancellationToken,
    /// Bytes queued to this socket now.
    queued: AtomicUsize,
    limits: Limits,
}

impl Outbox {
    /// The outbox of `sink`, and the writer task's future (run it until it ends).
    pub fn new<S>(sink: S, limits: Limits) -> (Arc<Outbox>, impl Future<Output = ()>)
    where
        S: Sink<Message> + Unpin,
    {
        let (tx, rx) = mpsc::channel(limits.frames);
        let outbox = Arc::new(Outbox {
            tx,
            close: Mutex::new(None),
            closed: CancellationToken::new(),
            abandoned: CancellationToken::new(),
            queued: AtomicUsize::new(0),
            limits,
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

    /// Queues a frame already serialized (and maybe shared with other sockets). Past this
    /// socket's frames or bytes, or every socket's bytes together, the client is let go (1013)
    /// and what waited for it is dropped.
    pub fn push_frame(&self, frame: Utf8Bytes) {
        if self.closed.is_cancelled() {
            return;
        }
        let size = frame.len();
        let mine = self.queued.fetch_add(size, Ordering::AcqRel) + size;
        let all = (self.limits.total.inc_by(size as i64) + size as i64).max(0) as usize;
        let behind = if mine > self.limits.bytes {
            Some(format!("the client fell behind: {mine} bytes unread"))
        } else if all > self.limits.total_bytes {
            Some(format!(
                "the server has {all} bytes waiting for clients; this one fell behind"
            ))
        } else {
            match self.tx.try_send((Message::Text(frame), size)) {
                Ok(()) => return,
                Err(TrySendError::Full(_)) => Some(format!(
                    "the client fell behind: {} frames unread",
                    self.tx.max_capacity()
                )),
                Err(TrySendError::Closed(_)) => None,
            }
        };
        self.sent(size);
        if let Some(reason) = behind {
            self.close(code::TRY_AGAIN_LATER, reason);
        }
    }

    /// `size` bytes left the queue.
    fn sent(&self, size: usize) {
        self.queued.fetch_sub(size, Ordering::AcqRel);
        self.limits.total.dec_by(size as i64);
    }

    /// Ends the socket with `code` (frames already queued go first, unless the client fell
    /// behind).
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let mut close = self.close.lock();
        if close.is_none() {
            *close = Some((code, reason.into()));
            if code == code::TRY_AGAIN_LATER {
                self.abandoned.cancel();
            }
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
        let _ = self.tx.try_send((Message::Ping(Default::default()), 0));
    }

    /// Runs one write to the client: false when it failed, the client was let go meanwhile, or
    /// it did not take the write within the write timeout (then it is let go).
    async fn within<F, E>(&self, write: F) -> bool
    where
        F: Future<Output = Result<(), E>>,
    {
        tokio::select! {
            done = tokio::time::timeout(self.limits.write_timeout, write) => match done {
                Ok(result) => result.is_ok(),
                Err(_) => {
                    self.close(
                        code::TRY_AGAIN_LATER,
                        format!("the client took nothing for {} s", self.limits.write_timeout.as_secs()),
                    );
                    false
                }
            },
            () = self.abandoned.cancelled() => false,
        }
    }
}

/// The writer: frames in batches (one flush per batch), then the close frame. A client that
/// does not read is let go without waiting for it, and what was queued for it is freed.
async fn write<S>(mut sink: S, rx: mpsc::Receiver<(Message, usize)>, outbox: Arc<Outbox>)
where
    S: Sink<Message> + Unpin,
{
    let mut queue = Queue {
        rx,
        outbox: outbox.clone(),
        unflushed: 0,
    };
    send_all(&mut sink, &mut queue).await;
    drop(queue);
    let (code, reason) = outbox
        .close
        .lock()
        .clone()
        .unwrap_or((code::NORMAL, String::new()));
    // A close reason is at most 123 bytes.
    let mut reason = reason;
    while reason.len() > 123 {
        reason.pop();
    }
    let close = Message::Close(Some(CloseFrame {
        code: code.into(),
        reason: reason.into(),
    }));
    // A client let go gets a moment to take the close frame, if its buffers have room.
    let wait = if outbox.abandoned.is_cancelled() {
        Duration::from_secs(1)
    } else {
        outbox.limits.write_timeout
    };
    let _ = tokio::time::timeout(wait, sink.send(close)).await;
    let _ = tokio::time::timeout(wait, sink.close()).await;
}

/// The receiving end of a socket's queue. A frame taken from it still counts until a flush
/// has written it to the socket. However the writer ends (finished, let go, or stopped), what
/// is still queued or unflushed is dropped and its bytes counted free again.
struct Queue {
    rx: mpsc::Receiver<(Message, usize)>,
    outbox: Arc<Outbox>,
    /// Bytes of the frames taken since the last flush.
    unflushed: usize,
}

impl Queue {
    async fn recv(&mut self) -> Option<Message> {
        let (message, size) = self.rx.recv().await?;
        self.unflushed += size;
        Some(message)
    }

    fn try_recv(&mut self) -> Option<Message> {
        let (message, size) = self.rx.try_recv().ok()?;
        self.unflushed += size;
        Some(message)
    }

    /// The frames taken so far have reached the socket.
    fn flushed(&mut self) {
        self.outbox.sent(std::mem::take(&mut self.unflushed));
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.rx.close();
        while let Ok((_, size)) = self.rx.try_recv() {
            self.outbox.sent(size);
        }
        self.flushed();
    }
}

/// Sends frames until the close is decided (then the ones already queued, unless the client
/// fell behind), or until the client is gone or let go.
async fn send_all<S>(sink: &mut S, queue: &mut Queue)
where
    S: Sink<Message> + Unpin,
{
    let outbox = queue.outbox.clone();
    loop {
        tokio::select! {
            biased;
            message = queue.recv() => {
                let Some(message) = message else { return };
                if !outbox.within(sink.feed(message)).await {
                    return;
                }
                while let Some(more) = queue.try_recv() {
                    if !outbox.within(sink.feed(more)).await {
                        return;
                    }
                }
                if !outbox.within(sink.flush()).await {
                    return;
                }
                queue.flushed();
            }
            () = outbox.closed.cancelled() => break,
        }
    }
    if outbox.abandoned.is_cancelled() {
        return;
    }
    while let Some(more) = queue.try_recv() {
        if !outbox.within(sink.feed(more)).await {
            return;
        }
    }
}

/// The read half's type, for the connection loop.
pub type Incoming = futures::stream::SplitStream<Socket>;

/// Splits a socket into its read half and its outbox with the writer's future.
pub fn split(socket: Socket, limits: Limits) -> (Incoming, Arc<Outbox>, impl Future<Output = ()>) {
    let (sink, stream) = socket.split();
    let (outbox, writer) = Outbox::new(sink, limits);
    (stream, outbox, writer)
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// A socket whose client never reads: it takes frames into its buffer but never flushes.
    struct Stuck(Arc<Mutex<Vec<Message>>>);

    impl Sink<Message> for Stuck {
        type Error = std::io::Error;

        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn start_send(self: Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
            self.0.lock().push(item);
            Ok(())
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Pending
        }

        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Pending
        }
    }

    fn limits(total: &Gauge<i64, AtomicI64>) -> Limits {
        Limits {
            frames: 16,
            bytes: 1 << 20,
            total_bytes: 1 << 20,
            total: total.clone(),
            write_timeout: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn frames_the_writer_took_count_until_they_reach_the_client() {
        let total = Gauge::<i64, AtomicI64>::default();
        let buffered = Arc::new(Mutex::new(Vec::new()));
        let (outbox, writer) = Outbox::new(Stuck(buffered.clone()), limits(&total));
        let writer = tokio::spawn(writer);
        for n in 0..3 {
            outbox.push_text(format!("frame {n} {}", "x".repeat(1000)));
        }
        // The writer takes every frame into the socket's buffer, where it waits for a flush
        // the client never lets happen.
        while buffered.lock().len() < 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            total.get(),
            3 * 1008,
            "the frames in the socket's buffer still count"
        );
        assert_eq!(outbox.queued.load(Ordering::Acquire), 3 * 1008);

        // Let go: what it held is free again.
        outbox.close(code::TRY_AGAIN_LATER, "fell behind");
        writer.abort();
        let _ = writer.await;
        assert_eq!(total.get(), 0);
    }
}
