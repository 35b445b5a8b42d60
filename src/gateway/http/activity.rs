//! What is in flight: a request counts from its head until its response body ends (an SSE
//! stream until its last event), per connection (a connection with nothing in flight for the
//! header timeout is closed) and in the in-flight gauge (which the shutdown report reads).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

use crate::gateway::metrics::Metrics;

/// One connection's requests in flight. Counted with atomics, not a channel: the idle watcher
/// checks them when its deadline comes instead of being woken by every request's start and end
/// (two task wakeups and a timer per request were a measurable share of the gateway's cost).
#[derive(Clone)]
pub struct Activity {
    counts: Arc<Counts>,
    metrics: Arc<Metrics>,
}

struct Counts {
    in_flight: AtomicUsize,
    /// When the connection opened.
    opened: Instant,
    /// When the last request ended, in nanoseconds after `opened` (0: none has yet).
    last_end: AtomicU64,
}

impl Activity {
    pub fn new(metrics: Arc<Metrics>) -> Activity {
        Activity {
            counts: Arc::new(Counts {
                in_flight: AtomicUsize::new(0),
                opened: Instant::now(),
                last_end: AtomicU64::new(0),
            }),
            metrics,
        }
    }

    /// A request arrived; it is in flight until the guard (kept by its response body) drops.
    pub fn begin(&self) -> InFlight {
        self.counts.in_flight.fetch_add(1, Ordering::AcqRel);
        self.metrics.in_flight(1);
        InFlight(self.clone())
    }

    /// Resolves once the connection has had no request in flight for `idle` in a row: from
    /// when it opened, or from when its last response ended.
    pub async fn idle_for(&self, idle: Duration) {
        let counts = &self.counts;
        let mut deadline = counts.opened + idle;
        loop {
            tokio::time::sleep_until(deadline).await;
            if counts.in_flight.load(Ordering::Acquire) > 0 {
                deadline = Instant::now() + idle;
                continue;
            }
            let idle_since =
                counts.opened + Duration::from_nanos(counts.last_end.load(Ordering::Acquire));
            if Instant::now() >= idle_since + idle {
                return;
            }
            deadline = idle_since + idle;
        }
    }
}

/// A request in flight; dropping it ends the request.
pub struct InFlight(Activity);

impl Drop for InFlight {
    fn drop(&mut self) {
        let counts = &self.0.counts;
        let since = Instant::now().saturating_duration_since(counts.opened);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        counts.last_end.fetch_max(nanos, Ordering::AcqRel);
        counts.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.in_flight(-1);
    }
}

/// A response body that keeps its request in flight until it ends or is dropped (the client
/// went away).
pub struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    pub fn new(body: B, in_flight: InFlight) -> Tracked<B> {
        Tracked {
            body,
            _in_flight: in_flight,
        }
    }
}

impl<B: HttpBody + Unpin> HttpBody for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
