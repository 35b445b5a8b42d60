//! Bytes of WebSocket messages being received, every socket together: a reader in front of
//! the WebSocket protocol that knows where frames begin and end, and reads a large message's
//! bytes only once the shared budget holds them. A message arrives whole before it is handled,
//! so without this every socket could hold up to the message limit while a slow or hostile
//! client dribbles one in; with it, sockets past the budget wait and the kernel keeps their
//! bytes (TCP backpressure), and small messages, which any live client sends, never wait.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::task::{Context, Poll, ready};

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;

/// Messages up to this size are read without the budget: one socket holds at most this much
/// unbudgeted, and a normal client's frames never wait behind a large one.
pub const FREE: usize = 16 * 1024;

/// The budget every socket's large messages share.
pub struct Budget {
    bytes: Arc<Semaphore>,
    total: usize,
    /// Bytes held by messages being received now.
    pub held: Gauge<i64, AtomicI64>,
    /// Sockets waiting for the budget now.
    pub waiting: Gauge<i64, AtomicI64>,
}

impl Budget {
    /// A budget of `total` bytes (clamped to what a semaphore counts).
    pub fn new(
        total: usize,
        held: Gauge<i64, AtomicI64>,
        waiting: Gauge<i64, AtomicI64>,
    ) -> Arc<Budget> {
        let total = total.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Arc::new(Budget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            held,
            waiting,
        })
    }
}

/// Where the reader is in the stream of frames (RFC 6455, section 5.2).
#[derive(Debug, Clone, Copy)]
enum At {
    /// Inside a frame's header: the bytes seen so far.
    Header { bytes: [u8; 14], seen: usize },
    /// Inside a frame's payload: bytes left, and whether it ends a message.
    Payload { left: u64, ends_message: bool },
}

/// A socket's stream with the budget kept in front of its reads.
pub struct Intake<S> {
    inner: S,
    budget: Arc<Budget>,
    /// The largest message the socket takes: more is never reserved (the protocol refuses it).
    max_message: usize,
    poll: PollSemaphore,
    at: At,
    /// Payload bytes of the message being received so far (its frames' lengths).
    message: u64,
    /// Bytes the message needs from the budget; `held` has them once `wanted <= held`.
    wanted: usize,
    held: Option<OwnedSemaphorePermit>,
    /// True while this socket is counted as waiting.
    waiting: bool,
    /// Bytes read from the socket but not yet handed on (behind a header that waits).
    stash: Vec<u8>,
}

impl<S> Intake<S> {
    pub fn new(inner: S, budget: Arc<Budget>, max_message: usize) -> Intake<S> {
        Intake {
            poll: PollSemaphore::new(budget.bytes.clone()),
            inner,
            budget,
            max_message,
            at: At::Header {
                bytes: [0; 14],
                seen: 0,
            },
            message: 0,
            wanted: 0,
            held: None,
            waiting: false,
            stash: Vec::new(),
        }
    }

    fn held(&self) -> usize {
        self.held.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Ready once the budget holds what the message being received needs.
    fn poll_reserve(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while self.wanted > self.held() {
            let more = (self.wanted - self.held()) as u32;
            match self.poll.poll_acquire_many(cx, more) {
                Poll::Pending => {
                    if !self.waiting {
                        self.waiting = true;
                        self.budget.waiting.inc();
                    }
                    return Poll::Pending;
                }
                // Never closed; were it, the message is read without the budget.
                Poll::Ready(None) => {
                    self.wanted = self.held();
                    break;
                }
                Poll::Ready(Some(permit)) => {
                    self.budget.held.inc_by(i64::from(more));
                    match &mut self.held {
                        Some(held) => held.merge(permit),
                        None => self.held = Some(permit),
                    }
                }
            }
        }
        self.stop_waiting();
        Poll::Ready(())
    }

    fn stop_waiting(&mut self) {
        if self.waiting {
            self.waiting = false;
            self.budget.waiting.dec();
        }
    }

    fn release(&mut self) {
        if let Some(permit) = self.held.take() {
            self.budget.held.dec_by(permit.num_permits() as i64);
        }
        self.wanted = 0;
    }

    /// Follows the frames over `bytes` and answers how many may be handed on now: all of them,
    /// or those up to the end of a header whose message needs more of the budget than it holds.
    fn scan(&mut self, bytes: &[u8]) -> usize {
        let mut i = 0;
        while i < bytes.len() {
            if self.wanted > self.held() {
                break;
            }
            match &mut self.at {
                At::Payload { left, ends_message } => {
                    let take = (*left).min((bytes.len() - i) as u64);
                    *left -= take;
                    i += take as usize;
                    if *left == 0 {
                        let ends = *ends_message;
                        self.at = At::Header {
                            bytes: [0; 14],
                            seen: 0,
                        };
                        if ends {
                            self.message = 0;
                            self.release();
                        }
                    }
                }
                At::Header {
                    bytes: header,
                    seen,
                } => {
                    header[*seen] = bytes[i];
                    *seen += 1;
                    i += 1;
                    if let Some((len, fin, control)) = parse_header(&header[..*seen]) {
                        let data = !control;
                        if data {
                            self.message = self.message.saturating_add(len);
                            if self.message > FREE as u64 {
                                let cap = self.budget.total.min(self.max_message);
                                self.wanted = (self.message.min(cap as u64)) as usize;
                            }
                        }
                        let ends_message = data && fin;
                        if len == 0 {
                            self.at = At::Header {
                                bytes: [0; 14],
                                seen: 0,
                            };
                            if ends_message {
                                self.message = 0;
                                self.release();
                            }
                        } else {
                            self.at = At::Payload {
                                left: len,
                                ends_message,
                            };
                        }
                    }
                }
            }
        }
        i
    }
}

/// A whole header's payload length, FIN bit and whether it is a control frame; `None` while
/// more header bytes are needed.
fn parse_header(header: &[u8]) -> Option<(u64, bool, bool)> {
    if header.len() < 2 {
        return None;
    }
    let fin = header[0] & 0x80 != 0;
    let control = header[0] & 0x08 != 0;
    let masked = header[1] & 0x80 != 0;
    let (extended, len7) = match header[1] & 0x7F {
        126 => (2, None),
        127 => (8, None),
        n => (0, Some(u64::from(n))),
    };
    let size = 2 + extended + if masked { 4 } else { 0 };
    if header.len() < size {
        return None;
    }
    let len = len7.unwrap_or_else(|| {
        header[2..2 + extended]
            .iter()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b))
    });
    Some((len, fin, control))
}

impl<S> Drop for Intake<S> {
    fn drop(&mut self) {
        self.stop_waiting();
        self.release();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Intake<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(this.poll_reserve(cx));
            if !this.stash.is_empty() {
                let stash = std::mem::take(&mut this.stash);
                let room = stash.len().min(buf.remaining());
                let ok = this.scan(&stash[..room]);
                buf.put_slice(&stash[..ok]);
                this.stash = stash;
                this.stash.drain(..ok);
                if ok > 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            let read = buf.filled().len() - before;
            if read == 0 {
                return Poll::Ready(Ok(()));
            }
            let ok = this.scan(&buf.filled()[before..]);
            if ok < read {
                this.stash
                    .extend_from_slice(&buf.filled()[before + ok..before + read]);
                buf.set_filled(before + ok);
            }
            if ok > 0 {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Intake<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

    use super::*;

    /// A masked frame from a client: `fin`, opcode, and a payload of `len` bytes.
    fn frame(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
        let mut bytes = vec![if fin { 0x80 } else { 0 } | opcode];
        match len {
            0..=125 => bytes.push(0x80 | len as u8),
            126..=0xFFFF => {
                bytes.push(0x80 | 126);
                bytes.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                bytes.push(0x80 | 127);
                bytes.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        bytes.extend_from_slice(&[1, 2, 3, 4]);
        bytes.extend(std::iter::repeat_n(opcode, len));
        bytes
    }

    fn budget(total: usize) -> Arc<Budget> {
        Budget::new(total, Gauge::default(), Gauge::default())
    }

    /// An intake over one end of a pipe, and the other end to write the client's bytes to.
    fn intake(budget: &Arc<Budget>) -> (Intake<DuplexStream>, DuplexStream) {
        let (server, client) = duplex(1 << 20);
        (Intake::new(server, budget.clone(), 1 << 20), client)
    }

    /// Reads `n` bytes through the intake, or `None` when they do not all come at once.
    async fn read_now(intake: &mut Intake<DuplexStream>, n: usize) -> Option<Vec<u8>> {
        let mut out = vec![0; n];
        let mut got = 0;
        while got < n {
            let read = tokio::time::timeout(
                std::time::Duration::from_millis(50),
                intake.read(&mut out[got..]),
            );
            match read.await {
                Ok(Ok(k)) if k > 0 => got += k,
                _ => return None,
            }
        }
        Some(out)
    }

    #[tokio::test]
    async fn a_large_message_is_read_past_its_header_only_once_the_budget_holds_it() {
        let budget = budget(100 * 1024);
        let (mut first, mut first_client) = intake(&budget);
        let (mut second, mut second_client) = intake(&budget);
        let large = frame(true, 1, 80 * 1024);
        first_client.write_all(&large[..1000]).await.unwrap();
        assert_eq!(
            read_now(&mut first, 1000).await.as_deref(),
            Some(&large[..1000])
        );
        assert_eq!(budget.held.get(), 80 * 1024);

        let other = frame(true, 1, 50 * 1024);
        let head = other.len() - 50 * 1024;
        second_client.write_all(&other).await.unwrap();
        // Its header passes (the protocol needs it to check the size); its payload waits.
        assert_eq!(
            read_now(&mut second, head).await.as_deref(),
            Some(&other[..head])
        );
        assert_eq!(read_now(&mut second, 1).await, None);
        assert_eq!(budget.waiting.get(), 1);

        // The first message arrives whole: its bytes go back to the budget.
        first_client.write_all(&large[1000..]).await.unwrap();
        assert_eq!(
            read_now(&mut first, large.len() - 1000).await.as_deref(),
            Some(&large[1000..])
        );
        assert_eq!(
            read_now(&mut second, other.len() - head).await.as_deref(),
            Some(&other[head..])
        );
        assert_eq!(budget.held.get(), 0);
        assert_eq!(budget.waiting.get(), 0);
    }

    #[tokio::test]
    async fn small_messages_pass_while_the_budget_is_spent() {
        let budget = budget(64 * 1024);
        let (mut holder, mut holder_client) = intake(&budget);
        let large = frame(true, 2, 64 * 1024);
        holder_client.write_all(&large[..100]).await.unwrap();
        read_now(&mut holder, 100).await.unwrap();
        assert_eq!(budget.held.get(), 64 * 1024);

        let (mut small, mut small_client) = intake(&budget);
        let mut bytes = Vec::new();
        for _ in 0..10 {
            bytes.extend(frame(true, 1, 1000));
        }
        small_client.write_all(&bytes).await.unwrap();
        assert_eq!(read_now(&mut small, bytes.len()).await, Some(bytes));

        // A socket that goes away gives back what it held.
        drop(holder);
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn the_fragments_of_one_message_count_together_and_control_frames_between_them_do_not() {
        let budget = budget(1 << 20);
        let (mut intake, mut client) = intake(&budget);
        let mut bytes = Vec::new();
        // Three fragments of 10 KB (each under the free size), with a ping between two.
        bytes.extend(frame(false, 1, 10_000));
        bytes.extend(frame(false, 0, 10_000));
        bytes.extend(frame(true, 9, 100));
        let last = frame(true, 0, 10_000);
        bytes.extend(&last[..10]);
        client.write_all(&bytes).await.unwrap();
        assert_eq!(read_now(&mut intake, bytes.len()).await, Some(bytes));
        assert_eq!(budget.held.get(), 30_000);

        client.write_all(&last[10..]).await.unwrap();
        read_now(&mut intake, last.len() - 10).await.unwrap();
        assert_eq!(budget.held.get(), 0, "the message ended");
    }

    #[tokio::test]
    async fn a_message_is_never_held_for_more_than_the_whole_budget() {
        // Larger than the budget: it takes all of it, once every other message has arrived.
        let budget = budget(32 * 1024);
        let (mut intake, mut client) = intake(&budget);
        let bytes = frame(true, 1, 100 * 1024);
        client.write_all(&bytes).await.unwrap();
        assert_eq!(read_now(&mut intake, bytes.len()).await, Some(bytes));
        assert_eq!(budget.held.get(), 0);
    }
}
