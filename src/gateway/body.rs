//! Request bodies: the whole body must arrive within the body timeout of its headers (a client
//! that sends headers and then trickles or stalls cannot hold a request open), and the error
//! for a body that could not be read: too slow (408), too large (413), unreadable (400).

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::gateway::GatewayError;

type BoxError = Box<dyn Error + Send + Sync>;

/// A request body with a deadline for all of it.
pub struct Deadline<B> {
    body: B,
    timeout: Duration,
    at: Instant,
    /// Made on the first wait only: a body that is already there costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> Deadline<B> {
    /// `timeout` counts from now (the request's headers just arrived).
    pub fn new(body: B, timeout: Duration) -> Deadline<B> {
        Deadline {
            body,
            timeout,
            at: Instant::now() + timeout,
            sleep: None,
        }
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
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let at = this.at;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(TooSlow(this.timeout))))),
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
        cause = err.source();
    }
    GatewayError::BadRequest(rejection.body_text())
}
