//! Bytes of WebSocket messages being received: a reader in front of the WebSocket protocol
//! that knows where frames begin and end. It does two things.
//! - **A budget every socket shares.** A message arrives whole before it is handled, so
//!   without it every socket could hold up to the message limit while a slow or hostile client
//!   dribbles one in. A message over [`FREE`] is read only once the budget holds it; sockets
//!   past it wait and the kernel keeps their bytes (TCP backpressure). Small messages, which
//!   any live client sends, never wait. A message that holds the budget must arrive within a
//!   deadline and keep its pace meanwhile ([`receiving::Pace`]), so no client keeps it. One
//!   client address holds at most its share of the budget (its sockets together), so one
//!   client cannot make every other client's large messages wait.
//! - **Frames in pieces.** A client's frame over [`PIECE`] bytes is handed on as several
//!   frames of at most that size (the same message, re-fragmented, with the same masking
//!   key: pieces start at multiples of 4 bytes). The protocol's read buffer grows to the largest frame it sees and keeps that
//!   size for the socket's life: 1,000 idle sockets that each once sent a 100 KB message held
//!   about 165 MB that way. In pieces it stays small, and a message's bytes are freed once it
//!   was handled.

use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::gateway::receiving::{self, Claim, FREE, Pace};

/// The largest frame handed on; larger ones are cut into frames of this size.
pub const PIECE: usize = 4 * 1024;

/// Bytes read from the socket at once.
const READ: usize = 4 * 1024;

/// The budget every socket's large messages share, with a share per client address. It
/// counts a message's size; the protocol gathers a message in pieces into a buffer that grows
/// by doubling, so for a moment a message can take up to about twice what it counts.
pub struct Budget {
    bytes: Arc<receiving::Budget>,
    /// How long a message that holds the budget may take to arrive whole.
    deadline: Duration,
}

impl Budget {
    /// A budget of `total` bytes, of which one client address holds at most `per_peer`,
    /// whose messages arrive within `deadline` once they hold it.
    pub fn new(
        total: usize,
        per_peer: usize,
        deadline: Duration,
        held: Gauge<i64, AtomicI64>,
        waiting: Gauge<i64, AtomicI64>,
    ) -> Arc<Budget> {
        Arc::new(Budget {
            bytes: receiving::Budget::new(total, per_peer, held, waiting),
            deadline,
        })
    }
}

impl std::ops::Deref for Budget {
    type Target = receiving::Budget;

    fn deref(&self) -> &receiving::Budget {
        &self.bytes
    }
}

/// A client's frame whose payload is being handed on.
struct Frame {
    /// The header's first byte (FIN, RSV, opcode).
    first: u8,
    mask: Option<[u8; 4]>,
    len: u64,
    /// Payload bytes handed on so far.
    done: u64,
    /// True once its first piece's header was made.
    started: bool,
}

impl Frame {
    fn control(&self) -> bool {
        self.first & 0x08 != 0
    }

    fn fin(&self) -> bool {
        self.first & 0x80 != 0
    }
}

/// A socket's stream with the budget kept in front of its reads.
pub struct Intake<S> {
    inner: S,
    budget: Arc<Budget>,
    /// The largest message the socket takes.
    max_message: usize,
    /// What the message being received holds of the budget.
    claim: Claim,
    /// Bytes read from the socket: `input[at..len]` are not handed on yet.
    input: Box<[u8]>,
    at: usize,
    len: usize,
    /// The header being read.
    header: [u8; 14],
    seen: usize,
    /// The frame being handed on.
    frame: Option<Frame>,
    /// The header of the piece being handed on: `out[sent..out_len]` are still to go.
    out: [u8; 14],
    out_len: usize,
    sent: usize,
    /// Payload bytes left in the piece being handed on.
    piece_left: u64,
    /// Payload bytes of the message being received so far (its frames' lengths).
    message: u64,
    /// Bytes the message waits for from the budget (0: none).
    wanted: usize,
    /// True once the message being received passed the budget (it never asks twice, so no
    /// socket waits while holding part of the budget).
    reserved: bool,
    /// When the message holding the budget must have arrived (or keep pace by).
    timer: Option<Pin<Box<Sleep>>>,
    /// Made when the message holds the budget: when it must have arrived whole, and the pace
    /// it keeps until then.
    pace: Option<(tokio::time::Instant, Pace)>,
    /// Payload bytes of the message holding the budget received so far.
    received: u64,
    /// True once a frame over the message limit was handed on as a header alone (the
    /// protocol refuses it): nothing more is read.
    refused: bool,
}

impl<S> Intake<S> {
    /// `inner`, a socket of `client`, whose messages take at most `max_message` bytes.
    pub fn new(inner: S, budget: Arc<Budget>, client: IpAddr, max_message: usize) -> Intake<S> {
        Intake {
            claim: Claim::new(budget.bytes.clone(), client),
            inner,
            budget,
            max_message,
            input: Box::default(),
            at: 0,
            len: 0,
            header: [0; 14],
            seen: 0,
            frame: None,
            out: [0; 14],
            out_len: 0,
            sent: 0,
            piece_left: 0,
            message: 0,
            wanted: 0,
            reserved: false,
            timer: None,
            pace: None,
            received: 0,
            refused: false,
        }
    }

    /// Ready once the budget holds what the message being received waits for (see
    /// [`Claim::poll_hold`]); its deadline starts then.
    fn poll_reserve(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.wanted > 0 {
            if self.claim.poll_hold(cx, self.wanted).is_pending() {
                return Poll::Pending;
            }
            if self.claim.holds() {
                let pace = Pace::new(self.wanted, self.budget.deadline);
                let end = tokio::time::Instant::now() + self.budget.deadline;
                self.timer = Some(Box::pin(tokio::time::sleep_until(pace.due(0).min(end))));
                self.pace = Some((end, pace));
                // What earlier fragments of the message brought counts towards its pace.
                self.received = self.message - self.frame.as_ref().map_or(0, |f| f.len);
            }
            self.reserved = true;
            self.wanted = 0;
        }
        Poll::Ready(())
    }

    /// The message ended (or the socket did): what it held goes back to the budget.
    fn release(&mut self) {
        self.claim.release();
        self.message = 0;
        self.reserved = false;
        self.wanted = 0;
        self.timer = None;
        self.pace = None;
    }

    /// An error once the message holding the budget is past its deadline or behind its pace.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let (Some(timer), Some((end, pace))) = (self.timer.as_mut(), self.pace) else {
            return Ok(());
        };
        let due = pace.due(self.received).min(end);
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        if timer.as_mut().poll(cx).is_pending() {
            return Ok(());
        }
        self.release();
        let message = if due < end {
            format!(
                "a message over {} KiB stopped arriving: holding room in the receive budget, after its first {:.1} s it must keep arriving at {} bytes a second or more",
                FREE / 1024,
                pace.grace().as_secs_f64(),
                pace.rate()
            )
        } else {
            format!(
                "a message over {} KiB did not arrive within {} s",
                FREE / 1024,
                self.budget.deadline.as_secs()
            )
        };
        Err(io::Error::new(io::ErrorKind::TimedOut, message))
    }

    /// Reads the next header's bytes from the input; the frame once its header is whole.
    fn read_header(&mut self) -> io::Result<Option<Frame>> {
        while self.at < self.len {
            self.header[self.seen] = self.input[self.at];
            self.seen += 1;
            self.at += 1;
            if let Some(frame) = parse_header(&self.header[..self.seen]) {
                self.seen = 0;
                return Ok(Some(frame));
            }
        }
        Ok(None)
    }

    /// Takes in a frame whose header was read: checks it, and decides what of the budget its
    /// message must get before its payload is read.
    fn admit(&mut self, frame: Frame) -> io::Result<()> {
        if frame.control() {
            if frame.len > 125 || !frame.fin() {
                self.release();
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a control frame must be whole and at most 125 bytes",
                ));
            }
        } else {
            let message = self.message.saturating_add(frame.len);
            if message > self.max_message as u64 {
                // The protocol refuses it from a header alone, before any of it is read.
                self.release();
                self.refused = true;
                self.frame = None;
                self.put_header(frame.first, None, self.max_message as u64 + 1);
                return Ok(());
            }
            if !self.reserved && message > FREE as u64 {
                // A message in fragments takes all it may need at once.
                let cap = self.budget.per_peer().min(self.max_message) as u64;
                self.wanted = if frame.fin() { message.min(cap) } else { cap } as usize;
            }
            self.message = message;
        }
        self.frame = Some(frame);
        Ok(())
    }

    /// Makes the header of the frame's next piece.
    fn next_piece(&mut self) {
        let Some(frame) = &mut self.frame else {
            return;
        };
        let size = (frame.len - frame.done).min(PIECE as u64);
        let opcode = if frame.started { 0 } else { frame.first & 0x0F };
        let last = frame.done + size == frame.len;
        let fin = if last { frame.first & 0x80 } else { 0 };
        let first = fin | (frame.first & 0x70) | opcode;
        // Pieces start at multiples of 4 bytes, where the masking key starts again.
        const _: () = assert!(PIECE.is_multiple_of(4));
        frame.started = true;
        let mask = frame.mask;
        self.put_header(first, mask, size);
        self.piece_left = size;
    }

    /// Once the piece being handed on is all out: a frame all handed on is done, and a message
    /// it ends gives its budget back (at once, not at the next read).
    fn settle(&mut self) {
        if self.sent < self.out_len || self.piece_left > 0 {
            return;
        }
        if let Some(frame) = &self.frame
            && frame.started
            && frame.done == frame.len
        {
            let ends = !frame.control() && frame.fin();
            self.frame = None;
            if ends {
                self.release();
            }
        }
    }

    /// Queues a header to hand on.
    fn put_header(&mut self, first: u8, mask: Option<[u8; 4]>, len: u64) {
        let masked = if mask.is_some() { 0x80 } else { 0 };
        self.out[0] = first;
        let mut n = 2;
        if len < 126 {
            self.out[1] = masked | len as u8;
        } else if len <= 0xFFFF {
            self.out[1] = masked | 126;
            self.out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            n = 4;
        } else {
            self.out[1] = masked | 127;
            self.out[2..10].copy_from_slice(&len.to_be_bytes());
            n = 10;
        }
        if let Some(key) = mask {
            self.out[n..n + 4].copy_from_slice(&key);
            n += 4;
        }
        self.out_len = n;
        self.sent = 0;
    }
}

impl<S: AsyncRead + Unpin> Intake<S> {
    /// Reads more from the socket once the input is used up; `false` at its end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        if self.input.is_empty() {
            self.input = vec![0; READ].into_boxed_slice();
        }
        let mut read = ReadBuf::new(&mut self.input);
        if Pin::new(&mut self.inner)
            .poll_read(cx, &mut read)?
            .is_pending()
        {
            // Nothing is waiting in it: an idle socket keeps no buffer.
            self.input = Box::default();
            self.len = 0;
            self.at = 0;
            return Poll::Pending;
        }
        self.len = read.filled().len();
        self.at = 0;
        Poll::Ready(Ok(self.len > 0))
    }
}

/// A whole header; `None` while more of its bytes are needed.
fn parse_header(header: &[u8]) -> Option<Frame> {
    if header.len() < 2 {
        return None;
    }
    let masked = header[1] & 0x80 != 0;
    let (extended, short) = match header[1] & 0x7F {
        126 => (2, None),
        127 => (8, None),
        n => (0, Some(u64::from(n))),
    };
    let size = 2 + extended + if masked { 4 } else { 0 };
    if header.len() < size {
        return None;
    }
    let len = short.unwrap_or_else(|| {
        header[2..2 + extended]
            .iter()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b))
    });
    Some(Frame {
        first: header[0],
        mask: masked.then(|| std::array::from_fn(|i| header[2 + extended + i])),
        len,
        done: 0,
        started: false,
    })
}

impl<S: AsyncRead + Unpin> AsyncRead for Intake<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The deadline and the pace are checked only when nothing more can be read now, so a
        // socket whose task ran late is not ended while the client's bytes wait to be read.
        match this.read_some(cx, buf) {
            Poll::Pending => {
                this.poll_deadline(cx)?;
                Poll::Pending
            }
            ready => ready,
        }
    }
}

impl<S: AsyncRead + Unpin> Intake<S> {
    /// Hands on what can be handed on now (see [`AsyncRead::poll_read`]).
    fn read_some(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self;
        let start = buf.filled().len();
        // What was handed on this call is returned before anything that may wait.
        let gave = |buf: &ReadBuf<'_>| buf.filled().len() > start;
        while buf.remaining() > 0 {
            if this.sent < this.out_len {
                let n = (this.out_len - this.sent).min(buf.remaining());
                buf.put_slice(&this.out[this.sent..this.sent + n]);
                this.sent += n;
                this.settle();
                continue;
            }
            if this.refused {
                if gave(buf) {
                    break;
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a message over the size limit",
                )));
            }
            if this.piece_left > 0 {
                if this.at == this.len {
                    if gave(buf) {
                        break;
                    }
                    if !ready!(this.poll_fill(cx))? {
                        break;
                    }
                }
                let n = (this.piece_left as usize)
                    .min(this.len - this.at)
                    .min(buf.remaining());
                buf.put_slice(&this.input[this.at..this.at + n]);
                this.at += n;
                this.piece_left -= n as u64;
                if let Some(frame) = &mut this.frame {
                    frame.done += n as u64;
                    if !frame.control() {
                        this.received += n as u64;
                    }
                }
                this.settle();
                continue;
            }
            if let Some(frame) = &this.frame {
                // Not done (`settle` takes done frames away): its first or next piece.
                if !frame.started && this.wanted > 0 {
                    if gave(buf) {
                        break;
                    }
                    ready!(this.poll_reserve(cx));
                }
                this.next_piece();
                continue;
            }
            match this.read_header()? {
                Some(frame) => this.admit(frame)?,
                None => {
                    if gave(buf) {
                        break;
                    }
                    if !ready!(this.poll_fill(cx))? {
                        break;
                    }
                }
            }
        }
        Poll::Ready(Ok(()))
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
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
    use tokio_tungstenite::tungstenite::{Error as WsError, Message};

    use super::*;

    const KEY: [u8; 4] = [0x11, 0x22, 0x33, 0x44];
    const MAX: usize = 1 << 20;

    /// The payload bytes of a test frame: a pattern, so a byte out of place shows.
    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// A masked frame from a client: `fin`, opcode, and a payload of `len` bytes.
    fn frame(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
        frame_of(fin, opcode, &payload(len))
    }

    /// A masked frame from a client carrying `data`.
    fn frame_of(fin: bool, opcode: u8, data: &[u8]) -> Vec<u8> {
        let len = data.len();
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
        bytes.extend_from_slice(&KEY);
        bytes.extend(data.iter().enumerate().map(|(i, b)| b ^ KEY[i % 4]));
        bytes
    }

    fn budget(total: usize) -> Arc<Budget> {
        budget_within(total, Duration::from_secs(60))
    }

    fn budget_within(total: usize, deadline: Duration) -> Arc<Budget> {
        Budget::new(total, total, deadline, Gauge::default(), Gauge::default())
    }

    /// The client address of the tests' sockets, unless one is given.
    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    /// An intake over one end of a pipe, and the other end to write the client's bytes to.
    fn intake(budget: &Arc<Budget>) -> (Intake<DuplexStream>, DuplexStream) {
        intake_of(budget, CLIENT)
    }

    /// [`intake`] for a socket of `client`.
    fn intake_of(budget: &Arc<Budget>, client: IpAddr) -> (Intake<DuplexStream>, DuplexStream) {
        let (server, peer) = duplex(4 << 20);
        (Intake::new(server, budget.clone(), client, MAX), peer)
    }

    type Server = WebSocketStream<Intake<DuplexStream>>;

    /// The WebSocket protocol over an intake, as `/ws` runs it.
    async fn server(budget: &Arc<Budget>) -> (Server, DuplexStream) {
        server_of(budget, CLIENT).await
    }

    /// [`server`] for a socket of `client`.
    async fn server_of(budget: &Arc<Budget>, client: IpAddr) -> (Server, DuplexStream) {
        let (intake, client) = intake_of(budget, client);
        let config = WebSocketConfig::default()
            .read_buffer_size(READ)
            .max_message_size(Some(MAX))
            .max_frame_size(Some(MAX));
        let socket = WebSocketStream::from_raw_socket(intake, Role::Server, Some(config)).await;
        (socket, client)
    }

    /// A socket whose client began a `len`-byte message and sent 100 bytes of it: it holds
    /// `len` of the budget (the socket, and its client's end).
    async fn holding(budget: &Arc<Budget>, len: usize) -> (Server, DuplexStream) {
        let (mut socket, mut client) = server(budget).await;
        client.write_all(&frame(true, 2, len)[..100]).await.unwrap();
        assert!(next_now(&mut socket).await.is_none());
        assert_eq!(budget.held.get(), len as i64);
        (socket, client)
    }

    /// The next message if it comes now.
    async fn next_now(socket: &mut Server) -> Option<Result<Message, WsError>> {
        tokio::time::timeout(Duration::from_millis(100), socket.next())
            .await
            .ok()
            .flatten()
    }

    /// Reads `intake` until it fails (it must not end first), and the error it failed with.
    async fn read_to_error(intake: &mut Intake<DuplexStream>) -> io::Error {
        let mut out = vec![0; 4096];
        loop {
            match intake.read(&mut out).await {
                Ok(n) => assert!(n > 0, "no end of stream before the deadline"),
                Err(err) => return err,
            }
        }
    }

    /// The next message's payload, which must come now.
    async fn message_now(socket: &mut Server) -> Vec<u8> {
        match next_now(socket).await {
            Some(Ok(Message::Binary(bytes))) => bytes.to_vec(),
            Some(Ok(Message::Text(text))) => text.as_bytes().to_vec(),
            other => panic!("no message: {other:?}"),
        }
    }

    /// What the intake hands on, read until nothing more comes now.
    async fn handed_on(intake: &mut Intake<DuplexStream>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0; 1000];
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), intake.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[tokio::test]
    async fn a_large_message_is_read_only_once_the_budget_holds_it() {
        let budget = budget(100 * 1024);
        let (mut first, mut first_client) = server(&budget).await;
        let (mut second, mut second_client) = server(&budget).await;
        let large = frame(true, 2, 80 * 1024);
        first_client.write_all(&large[..1000]).await.unwrap();
        assert!(next_now(&mut first).await.is_none());
        assert_eq!(budget.held.get(), 80 * 1024);

        second_client
            .write_all(&frame(true, 2, 50 * 1024))
            .await
            .unwrap();
        assert!(next_now(&mut second).await.is_none());
        assert_eq!(budget.waiting.get(), 1);

        // The first message arrives whole: its bytes go back to the budget, and the second
        // is read.
        first_client.write_all(&large[1000..]).await.unwrap();
        assert_eq!(message_now(&mut first).await, payload(80 * 1024));
        assert_eq!(message_now(&mut second).await, payload(50 * 1024));
        assert_eq!(budget.held.get(), 0);
        assert_eq!(budget.waiting.get(), 0);
    }

    #[tokio::test]
    async fn one_client_address_holds_at_most_its_share_of_the_budget() {
        let budget = Budget::new(
            200 * 1024,
            100 * 1024,
            Duration::from_secs(60),
            Gauge::default(),
            Gauge::default(),
        );
        let (greedy, other) = (CLIENT, IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2)));
        let (mut first, mut first_client) = server_of(&budget, greedy).await;
        let large = frame(true, 2, 80 * 1024);
        first_client.write_all(&large[..1000]).await.unwrap();
        assert!(next_now(&mut first).await.is_none());
        assert_eq!(budget.held.get(), 80 * 1024);

        // The same address's second large message passes its share, though the budget has
        // room: it waits.
        let (mut second, mut second_client) = server_of(&budget, greedy).await;
        second_client
            .write_all(&frame(true, 2, 50 * 1024))
            .await
            .unwrap();
        assert!(next_now(&mut second).await.is_none());
        assert_eq!(budget.waiting.get(), 1);

        // Another address's is read at once.
        let (mut third, mut third_client) = server_of(&budget, other).await;
        third_client
            .write_all(&frame(true, 2, 90 * 1024))
            .await
            .unwrap();
        assert_eq!(message_now(&mut third).await, payload(90 * 1024));

        // The first message arrives: the share has room again.
        first_client.write_all(&large[1000..]).await.unwrap();
        assert_eq!(message_now(&mut first).await, payload(80 * 1024));
        assert_eq!(message_now(&mut second).await, payload(50 * 1024));
        assert_eq!(budget.held.get(), 0);
        assert_eq!(budget.waiting.get(), 0);

        // Addresses whose sockets all closed are forgotten.
        drop((first, second, third));
        let _ = server_of(&budget, IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3))).await;
        assert_eq!(budget.addresses(), 1);
    }

    #[tokio::test]
    async fn small_messages_pass_while_the_budget_is_spent() {
        let budget = budget(64 * 1024);
        let holder = holding(&budget, 64 * 1024).await;

        let (mut small, mut small_client) = server(&budget).await;
        for _ in 0..10 {
            small_client.write_all(&frame(true, 2, 1000)).await.unwrap();
            assert_eq!(message_now(&mut small).await, payload(1000));
        }

        // A socket that goes away gives back what it held.
        drop(holder);
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn no_frame_handed_on_is_larger_than_a_piece_and_every_message_is_unchanged() {
        let budget = budget(MAX);
        let (mut intake, mut client) = intake(&budget);
        let sizes = [0, 1, PIECE - 1, PIECE, PIECE + 1, 70_000];
        let mut sent = Vec::new();
        for len in sizes {
            sent.extend(frame(true, 2, len));
        }
        // One message in three fragments, with a ping between two of them.
        sent.extend(frame(false, 2, 5000));
        sent.extend(frame(true, 9, 3));
        sent.extend(frame(false, 0, 3));
        sent.extend(frame(true, 0, 9000));
        client.write_all(&sent).await.unwrap();
        let out = handed_on(&mut intake).await;

        // Read back as frames: each at most a piece, masked, and the messages as sent.
        let mut messages: Vec<Vec<u8>> = Vec::new();
        let mut current = Vec::new();
        let mut pings = 0;
        let mut rest = &out[..];
        while !rest.is_empty() {
            let header = (2..=14)
                .find_map(|n| parse_header(&rest[..n.min(rest.len())]).map(|f| (n, f)))
                .expect("a whole header");
            let (n, frame) = header;
            assert!(
                frame.len as usize <= PIECE,
                "a frame of {} bytes",
                frame.len
            );
            let key = frame.mask.expect("masked");
            let data: Vec<u8> = rest[n..n + frame.len as usize]
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i % 4])
                .collect();
            rest = &rest[n + frame.len as usize..];
            if frame.control() {
                pings += 1;
                continue;
            }
            current.extend(data);
            if frame.fin() {
                messages.push(std::mem::take(&mut current));
            }
        }
        let mut expected: Vec<Vec<u8>> = sizes.iter().map(|&len| payload(len)).collect();
        expected.push([payload(5000), payload(3), payload(9000)].concat());
        assert_eq!(messages, expected);
        assert_eq!(pings, 1);
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn a_message_in_fragments_takes_the_budget_once_so_two_cannot_hold_each_other_up() {
        let budget = budget(64 * 1024);
        let (mut first, mut first_client) = server(&budget).await;
        let (mut second, mut second_client) = server(&budget).await;
        // Each starts a message with a 20 KB fragment; the first takes all it may need.
        first_client
            .write_all(&frame(false, 2, 20_000))
            .await
            .unwrap();
        assert!(next_now(&mut first).await.is_none());
        assert_eq!(budget.held.get(), 64 * 1024);
        second_client
            .write_all(&frame(false, 2, 20_000))
            .await
            .unwrap();
        assert!(next_now(&mut second).await.is_none());
        assert_eq!(budget.waiting.get(), 1);
        // The first message's next fragments never wait; once it ends, the second goes on.
        for fin in [false, true] {
            first_client
                .write_all(&frame(fin, 0, 20_000))
                .await
                .unwrap();
        }
        assert_eq!(message_now(&mut first).await, payload(20_000).repeat(3));
        second_client.write_all(&frame(true, 0, 1)).await.unwrap();
        assert_eq!(
            message_now(&mut second).await,
            [payload(20_000), payload(1)].concat()
        );
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn a_header_that_arrives_a_byte_at_a_time_is_followed() {
        let budget = budget(MAX);
        let (mut socket, mut client) = server(&budget).await;
        let bytes = [
            frame(true, 2, 70_000),
            frame(true, 2, 0),
            frame(true, 2, 10),
        ]
        .concat();
        for (n, byte) in bytes[..20].iter().enumerate() {
            client.write_all(&[*byte]).await.unwrap();
            assert!(next_now(&mut socket).await.is_none(), "byte {n}");
            if n == 13 {
                assert_eq!(budget.held.get(), 70_000, "the header is whole");
            }
        }
        client.write_all(&bytes[20..]).await.unwrap();
        assert_eq!(message_now(&mut socket).await, payload(70_000));
        assert_eq!(message_now(&mut socket).await, payload(0));
        assert_eq!(message_now(&mut socket).await, payload(10));
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn a_control_frame_longer_than_125_bytes_is_refused_before_its_payload() {
        let budget = budget(MAX);
        let (mut intake, mut client) = intake(&budget);
        client.write_all(&frame(true, 9, 100_000)).await.unwrap();
        let mut out = vec![0; 4096];
        let err = intake.read(&mut out).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn a_message_over_the_limit_is_refused_from_its_header_even_in_fragments() {
        let budget = budget(MAX);
        for frames in [
            vec![frame(true, 2, MAX + 1)],
            vec![frame(false, 2, 600_000), frame(true, 0, 600_000)],
        ] {
            let (mut socket, mut client) = server(&budget).await;
            let last = frames.last().unwrap();
            for f in &frames[..frames.len() - 1] {
                client.write_all(f).await.unwrap();
            }
            // Only the last frame's header: the refusal needs none of its payload.
            client.write_all(&last[..14]).await.unwrap();
            match next_now(&mut socket).await {
                Some(Err(WsError::Capacity(_))) => {}
                other => panic!("not refused: {other:?}"),
            }
        }
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_holding_the_budget_past_its_deadline_ends_the_socket() {
        let budget = budget_within(MAX, Duration::from_secs(60));
        let (mut intake, mut client) = intake(&budget);
        // Ahead of its pace (99% of it at once), but never whole.
        let large = frame(true, 2, 100_000);
        client.write_all(&large[..99_000]).await.unwrap();
        let err = read_to_error(&mut intake).await;
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(
            err.to_string().contains("did not arrive within 60 s"),
            "{err}"
        );
        drop(intake);
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_in_fragments_counts_what_its_earlier_fragments_brought_towards_its_pace() {
        let budget = budget_within(MAX, Duration::from_secs(60));
        let (mut socket, mut client) = server(&budget).await;
        // 16 KiB, unbudgeted; then a last 1 KiB fragment makes the message 17 KiB, which
        // holds the budget: 16 of its 17 KiB are there, so its pace allows about a minute for
        // the last one.
        client.write_all(&frame(false, 2, 16 * 1024)).await.unwrap();
        let last = frame(true, 0, 1024);
        client.write_all(&last[..8]).await.unwrap();
        assert!(next_now(&mut socket).await.is_none());
        assert_eq!(budget.held.get(), 17 * 1024);
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            client.write_all(&last[8..]).await.unwrap();
            client
        });
        match socket.next().await {
            Some(Ok(Message::Binary(data))) => assert_eq!(data.len(), 17 * 1024),
            other => panic!("no message: {other:?}"),
        }
        drop(sender.await.unwrap());
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_holding_the_budget_that_falls_behind_its_pace_ends_the_socket_before_its_deadline()
     {
        // Its pace: after 10 s, 100,000 bytes over 60 s (1,667 bytes a second).
        let budget = budget_within(MAX, Duration::from_secs(60));
        let (mut intake, mut client) = intake(&budget);
        let large = frame(true, 2, 100_000);
        let started = tokio::time::Instant::now();
        client.write_all(&large[..500]).await.unwrap();
        let err = read_to_error(&mut intake).await;
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("stopped arriving"), "{err}");
        // The clock is the test's own (paused): behind its pace after the grace and what its
        // 500 bytes bought, far before the 60 s deadline.
        assert!(
            started.elapsed() < Duration::from_secs(11),
            "{:?}",
            started.elapsed()
        );
        drop(intake);
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_holding_the_budget_that_keeps_its_pace_arrives_however_slowly() {
        // Its pace: after 10 s, 100,000 bytes over 60 s; it comes in 20 pieces 2 s apart.
        let budget = budget_within(MAX, Duration::from_secs(60));
        let (mut socket, mut client) = server(&budget).await;
        let large = frame(true, 2, 100_000);
        let sender = tokio::spawn(async move {
            for piece in large.chunks(large.len().div_ceil(20)) {
                client.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            client
        });
        match socket.next().await {
            Some(Ok(Message::Binary(data))) => assert_eq!(data.to_vec(), payload(100_000)),
            other => panic!("no message: {other:?}"),
        }
        drop(sender.await.unwrap());
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn a_socket_that_goes_while_waiting_is_no_longer_counted_as_waiting() {
        let budget = budget(32 * 1024);
        let _holder = holding(&budget, 32 * 1024).await;
        let (mut waiter, mut waiter_client) = server(&budget).await;
        waiter_client
            .write_all(&frame(true, 2, 32 * 1024))
            .await
            .unwrap();
        assert!(next_now(&mut waiter).await.is_none());
        assert_eq!(budget.waiting.get(), 1);
        drop(waiter);
        assert_eq!(budget.waiting.get(), 0);
        assert_eq!(budget.held.get(), 32 * 1024);
    }

    #[tokio::test]
    async fn a_message_is_never_held_for_more_than_the_whole_budget() {
        // Larger than the budget: it takes all of it, once every other message has arrived.
        let budget = budget(32 * 1024);
        let (mut socket, mut client) = server(&budget).await;
        client.write_all(&frame(true, 2, 100 * 1024)).await.unwrap();
        assert_eq!(message_now(&mut socket).await, payload(100 * 1024));
        assert_eq!(budget.held.get(), 0);
    }

    #[tokio::test]
    async fn a_text_message_cut_inside_a_character_arrives_as_the_same_text() {
        let budget = budget(MAX);
        let (mut socket, mut client) = server(&budget).await;
        // Three-byte characters: a piece boundary (every 4 KiB) falls inside one.
        let text = "€".repeat(10_000);
        client
            .write_all(&frame_of(true, 1, text.as_bytes()))
            .await
            .unwrap();
        match next_now(&mut socket).await {
            Some(Ok(Message::Text(got))) => assert_eq!(got.as_str(), text),
            other => panic!("not the text: {other:?}"),
        }
    }

    #[tokio::test]
    async fn what_the_protocol_refuses_in_one_frame_it_still_refuses_in_pieces() {
        let budget = budget(MAX);
        let mut bad_utf8 = "a".repeat(10_000).into_bytes();
        bad_utf8[5000] = 0xFF;
        let mut rsv1 = frame(true, 2, 10_000);
        rsv1[0] |= 0x40;
        let cases = [
            (
                "invalid UTF-8 past the first piece",
                frame_of(true, 1, &bad_utf8),
            ),
            ("a continuation with no start", frame(true, 0, 10_000)),
            ("a reserved bit without an extension", rsv1),
            (
                "a new message inside one not ended",
                [frame(false, 2, 10_000), frame(true, 2, 10_000)].concat(),
            ),
        ];
        for (case, bytes) in cases {
            let (mut socket, mut client) = server(&budget).await;
            client.write_all(&bytes).await.unwrap();
            match next_now(&mut socket).await {
                Some(Err(WsError::Utf8(_) | WsError::Protocol(_))) => {}
                other => panic!("{case}: not refused: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_message_gives_its_budget_back_when_its_last_byte_is_handed_on() {
        let budget = budget(MAX);
        let (mut intake, mut client) = intake(&budget);
        // 20 KB in one frame: four whole pieces, then one of 3,616 bytes.
        client.write_all(&frame(true, 2, 20_000)).await.unwrap();
        let mut buf = vec![0; 8192];
        for piece in [PIECE, PIECE, PIECE, PIECE] {
            // Exactly one piece with its header (a 16-bit length, then the key).
            let exact = 4 + 4 + piece;
            let mut got = 0;
            while got < exact {
                got += intake.read(&mut buf[got..exact]).await.unwrap();
            }
            assert_eq!(budget.held.get(), 20_000);
        }
        let exact = 4 + 4 + 20_000 - 4 * PIECE;
        let mut got = 0;
        while got < exact {
            got += intake.read(&mut buf[got..exact]).await.unwrap();
        }
        assert_eq!(budget.held.get(), 0, "given back without another read");
    }
}
