//! Request bodies: the whole body must arrive within the body timeout of its headers (a client
//! that sends headers and then trickles or stalls cannot hold a request open); a body over
//! [`FREE`] is read only once the receive budget every connection shares (and its client's
//! share of it) holds it, so clients that dribble bodies in cannot make the server hold one
//! body limit per connection, and once it holds it, it must keep its [`Pace`], so clients that
//! announce large bodies and stall cannot keep the budget from others; and the error for a
//! body that could not be read: too slow (408), too large (413), unreadable (400).

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use bytes::Buf;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::gateway::GatewayError;
use crate::gateway::receiving::{Budget, Claim, FREE, Pace};

type BoxError = Box<dyn Error + Send + Sync>;

/// A request body with a deadline for all of it, read within the receive budget.
pub struct Deadline<B> {
    body: B,
    timeout: Duration,
    at: Instant,
    /// Made on the first wait only: a body that is already there costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The budget and the client it is read for (`None`: unbudgeted), and the most a body
    /// may have (what one of unknown length claims).
    budget: Option<(Arc<Budget>, IpAddr)>,
    limit: usize,
    /// Made when the body is first read, if it is large: what it holds of the budget.
    claim: Option<Claim>,
    /// Made once the claim holds: the pace its bytes must keep from then.
    pace: Option<Pace>,
    /// Data bytes read so far.
    received: u64,
    /// Bytes it waits to hold before its first byte is read (`None`: not sized yet; 0: none,
    /// or no more: it ended).
    wanted: Option<usize>,
    /// Whether a body the budget cannot hold now waits for it (HTTP/1) or is refused as busy
    /// (HTTP/2, see [`Deadline::within`]).
    wait: bool,
}

impl<B> Deadline<B> {
    /// `timeout` counts from now (the request's headers just arrived).
    pub fn new(body: B, timeout: Duration) -> Deadline<B> {
        Deadline {
            body,
            timeout,
            at: Instant::now() + timeout,
            sleep: None,
            budget: None,
            limit: 0,
            claim: None,
            pace: None,
            received: 0,
            wanted: None,
            wait: true,
        }
    }

    /// Read for `client` within `budget`: a body over [`FREE`] (or of unknown length) first
    /// holds its length, at most `limit`, then is read. Over HTTP/1 (`wait`) a body the budget
    /// cannot hold yet waits, and its client's bytes wait in the network. Over HTTP/2 the
    /// connection receives a stream's data whether or not it is read, and a stream left unread
    /// fills the connection's window and stalls its other streams, so there a body the budget
    /// cannot hold at once is refused as busy (503 with `Retry-After`).
    pub fn within(
        mut self,
        budget: Arc<Budget>,
        client: IpAddr,
        limit: usize,
        wait: bool,
    ) -> Deadline<B> {
        self.budget = Some((budget, client));
        self.limit = limit;
        self.wait = wait;
        self
    }
}

impl<B: HttpBody> Deadline<B> {
    /// Ready once the budget holds what the body needs (at once for a small one).
    fn poll_budget(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some((budget, client)) = &self.budget else {
            return Poll::Ready(());
        };
        // A body claims its `content-length`, at most the limit; one of unknown length the
        // limit; a small one nothing.
        let wanted = *self
            .wanted
            .get_or_insert_with(|| match self.body.size_hint().upper() {
                Some(upper) if upper <= FREE as u64 => 0,
                upper => upper.map_or(self.limit, |n| n.min(self.limit as u64) as usize),
            });
        if wanted == 0 {
            return Poll::Ready(());
        }
        let claim = self
            .claim
            .get_or_insert_with(|| Claim::new(budget.clone(), *client));
        let held = claim.poll_hold(cx, wanted);
        if held.is_ready() && claim.holds() && self.pace.is_none() {
            self.pace = Some(Pace::new(wanted, self.timeout));
        }
        held
    }

    /// When the body is cut, and whether for falling behind its pace (else for its timeout).
    fn due(&self) -> (Instant, bool) {
        match &self.pace {
            Some(pace) if pace.due(self.received) < self.at => (pace.due(self.received), true),
            _ => (self.at, false),
        }
    }

    /// The body arrived, or will not: what it held goes back, and it never asks again (a
    /// reader polls once more after the last frame).
    fn release(&mut self) {
        self.claim = None;
        self.pace = None;
        self.wanted = Some(0);
    }
}

/// The body did not arrive in time (in the words of the answer it becomes).
#[derive(Debug)]
pub struct TooSlow(Duration);

impl fmt::Display for TooSlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        GatewayError::BodyTimeout { timeout: self.0 }.fmt(f)
    }
}

impl Error for TooSlow {}

/// The body, holding the budget, fell behind its [`Pace`].
#[derive(Debug)]
pub struct Stalled {
    rate: u64,
    grace: Duration,
}

impl fmt::Display for Stalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error().fmt(f)
    }
}

impl Stalled {
    fn error(&self) -> GatewayError {
        GatewayError::BodyStalled {
            rate: self.rate,
            grace: self.grace,
        }
    }
}

impl Error for Stalled {}

/// The body's length is over the body limit (answered 413 from the head).
#[derive(Debug)]
pub struct OverLimit;

impl fmt::Display for OverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body is longer than the body limit")
    }
}

impl Error for OverLimit {}

/// The receive budget could not hold the body at once, where it may not wait (HTTP/2).
#[derive(Debug)]
pub struct Busy;

const BUSY: &str =
    "request bodies being received hold the server's budget for them; try again in a moment";

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(BUSY)
    }
}

impl Error for Busy {}

impl<B> HttpBody for Deadline<B>
where
    B: HttpBody + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.get_mut();
        // A body whose length is over the limit is refused from its head, before it takes any
        // of the budget or is read.
        if this.budget.is_some()
            && this.wanted.is_none()
            && this.body.size_hint().lower() > this.limit as u64
        {
            this.release();
            return Poll::Ready(Some(Err(Box::new(OverLimit))));
        }
        let held = this.poll_budget(cx).is_ready();
        if !held && !this.wait {
            this.release();
            return Poll::Ready(Some(Err(Box::new(Busy))));
        }
        if held && let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref))
                && let Some(data) = data
            {
                this.received += data.remaining() as u64;
            }
            if !matches!(frame, Some(Ok(_))) || this.body.is_end_stream() {
                this.release();
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let (due, behind) = this.due();
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if sleep.deadline() != due {
            sleep.as_mut().reset(due);
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let err: BoxError = match (behind, &this.pace) {
                    (true, Some(pace)) => Box::new(Stalled {
                        rate: pace.rate(),
                        grace: pace.grace(),
                    }),
                    _ => Box::new(TooSlow(this.timeout)),
                };
                this.release();
                Poll::Ready(Some(Err(err)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Why a body could not be read.
pub fn rejected(rejection: &BytesRejection, limit: usize) -> GatewayError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return GatewayError::TooLarge { limit };
    }
    let mut cause: Option<&(dyn Error + 'static)> = Some(rejection);
    while let Some(err) = cause {
        if let Some(slow) = err.downcast_ref::<TooSlow>() {
            return GatewayError::BodyTimeout { timeout: slow.0 };
        }
        if let Some(stalled) = err.downcast_ref::<Stalled>() {
            return stalled.error();
        }
        if err.is::<Busy>() {
            return GatewayError::Unavailable(BUSY.into());
        }
        if err.is::<OverLimit>() {
            return GatewayError::TooLarge { limit };
        }
        cause = err.source();
    }
    GatewayError::BadRequest(rejection.body_text())
}
