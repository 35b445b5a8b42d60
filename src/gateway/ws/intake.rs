//! Bytes of WebSocket messages being received, every socket together: a reader in front of
//! the WebSocket protocol that knows where frames begin and end, and reads a large message's
//! bytes only once the shared budget holds them. A message arrives whole before it is handled,
//! so without this every socket could hold up to the message limit while a slow or hostile
//! client dribbles one in; with it, sockets past the budget wait and the kernel keeps their
//! bytes (TCP backpressure), and small messages, which any live client sends, never wait. A
//! message that holds the budget must arrive within a deadline, so no client keeps it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_util::sync::PollSemaphore;

/// Messages up to this size are read without the budget: one socket holds at most this much
/// unbudgeted, and a normal client's frames never wait behind a large one.
pub const FREE: usize = 16 * 1024;

/// The budget every socket's large messages share.
pub struct Budget {
    bytes: Arc<Semaphore>,
    total: usize,
    /// How long a message that holds the budget may take to arrive whole.
    deadline: Duration,
    /// Bytes held by messages being received now.
    pub held: Gauge<i64, AtomicI64>,
    /// Sockets waiting for the budget now.
    pub waiting: Gauge<i64, AtomicI64>,
}

impl Budget {
    /// A budget of `total` bytes (clamped to what a semaphore counts) whose messages arrive
    /// within `deadline` once they hold it.
    pub fn new(
        total: usize,
        deadline: Duration,
        held: Gauge<i64, AtomicI64>,
        waiting: Gauge<i64, AtomicI64>,
    ) -> Arc<Budget> {
        let total = total.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Arc::new(Budget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            deadline,
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

const HEADER: At = At::Header {
    bytes: [0; 14],
    seen: 0,
};

/// A frame's header, whole.
struct Header {
    len: u64,
    fin: bool,
    control: bool,
}

/// A socket's stream with the budget kept in front of its reads.
pub struct Intake<S> {
    inner: S,
    budget: Arc<Budget>,
    /// The largest message the socket takes: a frame over it passes unbudgeted, for the
    /// protocol to refuse from its header.
    max_message: usize,
    poll: PollSemaphore,
    at: At,
    /// Payload bytes of the message being received so far (its frames' lengths).
    message: u64,
    /// Bytes the message waits for from the budget (0: none).
    wanted: usize,
    /// True once the message being received passed the budget (it never asks twice, so no
    /// socket waits while holding part of the budget).
    reserved: bool,
    held: Option<OwnedSemaphorePermit>,
    /// When the message holding the budget must have arrived.
    timer: Option<Pin<Box<Sleep>>>,
    /// True while this socket is counted as waiting.
    waiting: bool,
    /// Bytes read from the socket but not yet handed on (from a header that waits).
    stash: Vec<u8>,
}

impl<S> Intake<S> {
    pub fn new(inner: S, budget: Arc<Budget>, max_message: usize) -> Intake<S> {
        Intake {
            poll: PollSemaphore::new(budget.bytes.clone()),
            inner,
            budget,
            max_message,
            at: HEADER,
            message: 0,
            wanted: 0,
            reserved: false,
            held: None,
            timer: None,
            waiting: false,
            stash: Vec::new(),
        }
    }

    /// Ready once the budget holds what the message being received waits for.
    fn poll_reserve(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.wanted > 0 {
            let wanted = self.wanted as u32;
            match self.poll.poll_acquire_many(cx, wanted) {
                Poll::Pending => {
                    if !self.waiting {
                        self.waiting = true;
                        self.budget.waiting.inc();
                    }
                    return Poll::Pending;
                }
                Poll::Ready(permit) => {
                    // `None`: the budget was closed (it never is); the message goes unbudgeted.
                    if let Some(permit) = permit {
                        self.budget.held.inc_by(i64::from(wanted));
                        self.held = Some(permit);
                        self.timer = Some(Box::pin(tokio::time::sleep(self.budget.deadline)));
                    }
                    self.reserved = true;
                    self.wanted = 0;
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

    /// The message ended (or the socket did): what it held goes back to the budget.
    fn release(&mut self) {
        if let Some(permit) = self.held.take() {
            self.budget.held.dec_by(permit.num_permits() as i64);
        }
        self.message = 0;
        self.reserved = false;
        self.wanted = 0;
        self.timer = None;
    }

    /// Follows the frames over `bytes` and answers how many may be handed on now: all of them,
    /// or those before the last byte of a header whose message must first get the budget (so
    /// that nothing is allocated for the message before then).
    fn scan(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut i = 0;
        while i < bytes.len() {
            match &mut self.at {
                At::Payload { left, ends_message } => {
                    let take = (*left).min((bytes.len() - i) as u64);
                    *left -= take;
                    i += take as usize;
                    if *left == 0 {
                        let ends = *ends_message;
                        self.at = HEADER;
                        if ends {
                            self.release();
                        }
                    }
                }
                At::Header {
                    bytes: header,
                    seen,
                } => {
                    header[*seen] = bytes[i];
                    let Some(frame) = parse_header(&header[..*seen + 1]) else {
                        *seen += 1;
                        i += 1;
                        continue;
                    };
                    if frame.control && (frame.len > 125 || !frame.fin) {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a control frame must be whole and at most 125 bytes",
                        ));
                    }
                    if !frame.control && !self.reserved && frame.len <= self.max_message as u64 {
                        let message = self.message.saturating_add(frame.len);
                        if message > FREE as u64 {
                            // A message in fragments takes all it may need at once.
                            let cap = self.budget.total.min(self.max_message) as u64;
                            self.wanted = if frame.fin { message.min(cap) } else { cap } as usize;
                            break;
                        }
                    }
                    i += 1;
                    if !frame.control {
                        self.message = self.message.saturating_add(frame.len);
                    }
                    let ends_message = !frame.control && frame.fin;
                    if frame.len > 0 {
                        self.at = At::Payload {
                            left: frame.len,
                            ends_message,
                        };
                    } else {
                        self.at = HEADER;
                        if ends_message {
                            self.release();
                        }
                    }
                }
            }
        }
        Ok(i)
    }

    /// An error once the message holding the budget is past its deadline.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let passed = self
            .timer
            .as_mut()
            .is_some_and(|timer| timer.as_mut().poll(cx).is_ready());
        if passed {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "a message over {} KiB did not arrive within {} s",
                    FREE / 1024,
                    self.budget.deadline.as_secs()
                ),
            ));
        }
        Ok(())
    }
}

/// A whole header; `None` while more of its bytes are needed.
fn parse_header(header: &[u8]) -> Option<Header> {
    if header.len() < 2 {
        return None;
    }
    let masked = header[1] & 0x80 != 0;
    let (extended, short) = match header[1] & 0x7F {
        126 => (2, None),
        127 => (8, None),
        n => (0, Some(u64::from(n))),
    };
    if header.len() < 2 + extended + if masked { 4 } else { 0 } {
        return None;
    }
    let len = short.unwrap_or_else(|| {
        header[2..2 + extended]
            .iter()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b))
    });
    Some(Header {
        len,
        fin: header[0] & 0x80 != 0,
        control: header[0] & 0x08 != 0,
    })
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
            this.poll_deadline(cx)?;
            if !this.stash.is_empty() {
                let stash = std::mem::take(&mut this.stash);
                let room = stash.len().min(buf.remaining());
                let ok = this.scan(&stash[..room]);
                this.stash = stash;
                let ok = ok?;
                buf.put_slice(&this.stash[..ok]);
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
            let ok = this.scan(&buf.filled()[before..])?;
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
        budget_within(total, Duration::from_secs(60))
    }

    fn budget_within(total: usize, deadline: Duration) -> Arc<Budget> {
        Budget::new(total, deadline, Gauge::default(), Gauge::default())
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
        // All of its header but the last byte passes: nothing is allocated for the message
        // before the budget holds it.
        assert_eq!(
            read_now(&mut second, head - 1).await.as_deref(),
            Some(&other[..head - 1])
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
            read_now(&mut second, other.len() - head + 1)
                .await
                .as_deref(),
            Some(&other[head - 1..])
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
        // A 10 KB fragment, then pings: under the free size, nothing is taken.
        let mut bytes = frame(false, 1, 10_000);
        bytes.extend(frame(true, 9, 100));
        bytes.extend(frame(true, 9, 100));
        client.write_all(&bytes).await.unwrap();
        assert_eq!(read_now(&mut intake, bytes.len()).await, Some(bytes));
        assert_eq!(budget.held.get(), 0);
        // A second 10 KB fragment passes the free size: the message takes what the largest
        // message may need, once.
        let more = frame(false, 0, 10_000);
        let last = frame(true, 0, 10_000);
        client.write_all(&more).await.unwrap();
        client.write_all(&last[..10]).await.unwrap();
        read_now(&mut intake, more.len() + 10).await.unwrap();
        assert_eq!(budget.held.get(), 1 << 20);

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

    #[tokio::test]
    async fn a_message_in_fragments_takes_the_budget_once_so_two_cannot_hold_each_other_up() {
        let budget = budget(64 * 1024);
        let (mut first, mut first_client) = intake(&budget);
        let (mut second, mut second_client) = intake(&budget);
        // Each starts a message with a 20 KB fragment; the first takes all it may need.
        let start = frame(false, 1, 20_000);
        first_client.write_all(&start).await.unwrap();
        assert_eq!(read_now(&mut first, start.len()).await, Some(start.clone()));
        assert_eq!(budget.held.get(), 64 * 1024);
        second_client.write_all(&start).await.unwrap();
        assert_eq!(read_now(&mut second, start.len()).await, None);
        // The first message's next fragments never wait; once it ends, the second goes on.
        let rest = [frame(false, 0, 20_000), frame(true, 0, 20_000)].concat();
        first_client.write_all(&rest).await.unwrap();
        assert_eq!(read_now(&mut first, rest.len()).await, Some(rest));
        assert_eq!(
            read_now(&mut second, start.len() - 7).await.as_deref(),
            Some(&start[7..])
        );
        assert_eq!(budget.held.get(), 64 * 1024);
    }

    #[tokio::test]
    async fn a_header_that_arrives_a_byte_at_a_time_is_followed() {
        let budget = budget(1 << 20);
        let (mut intake, mut client) = intake(&budget);
        let bytes = [
            frame(true, 1, 70_000),
            frame(true, 1, 0),
            frame(true, 1, 10),
        ]
        .concat();
        for (n, byte) in bytes.iter().enumerate() {
            client.write_all(&[*byte]).await.unwrap();
            assert_eq!(
                read_now(&mut intake, 1).await,
                Some(vec![*byte]),
                "byte {n}"
            );
            if n == 14 {
                assert_eq!(budget.held.get(), 70_000);
            }
        }
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn a_control_frame_longer_than_125_bytes_is_refused_before_its_payload() {
        let budget = budget(1 << 20);
        let (mut intake, mut client) = intake(&budget);
        client.write_all(&frame(true, 9, 100_000)).await.unwrap();
        let mut out = vec![0; 4096];
        let err = intake.read(&mut out).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn a_message_holding_the_budget_past_its_deadline_ends_the_socket() {
        let budget = budget_within(1 << 20, Duration::from_millis(200));
        let (mut intake, mut client) = intake(&budget);
        let large = frame(true, 1, 100_000);
        client.write_all(&large[..500]).await.unwrap();
        read_now(&mut intake, 500).await.unwrap();
        let mut out = vec![0; 4096];
        let err = intake.read(&mut out).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(intake);
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn a_socket_that_goes_while_waiting_is_no_longer_counted_as_waiting() {
        let budget = budget(32 * 1024);
        let (mut holder, mut holder_client) = intake(&budget);
        let large = frame(true, 1, 32 * 1024);
        holder_client.write_all(&large[..100]).await.unwrap();
        read_now(&mut holder, 100).await.unwrap();
        let (mut waiter, mut waiter_client) = intake(&budget);
        waiter_client.write_all(&large).await.unwrap();
        assert_eq!(read_now(&mut waiter, 100).await, None);
        assert_eq!(budget.waiting.get(), 1);
        drop(waiter);
        assert_eq!(budget.waiting.get(), 0);
        assert_eq!(budget.held.get(), 32 * 1024);
    }
}
