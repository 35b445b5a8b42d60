//! What is in flight: a request counts from its head until its response body ends (an SSE
//! stream until its last event), per connection (a connection with nothing in flight for the
//! header timeout is closed) and in the in-flight gauge (which the shutdown report reads).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::watch;

use crate::gateway::metrics::Metrics;

/// One connection's requests in flight.
#[derive(Clone)]
pub struct Activity {
    requests: Arc<watch::Sender<usize>>,
    metrics: Arc<Metrics>,
}

impl Activity {
    pub fn new(metrics: Arc<Metrics>) -> Activity {
        Activity {
            requests: Arc::new(watch::Sender::new(0)),
            metrics,
        }
    }

    /// A request arrived; it is in flight until the guard (kept by its response body) drops.
    pub fn begin(&self) -> InFlight {
        self.requests.send_modify(|n| *n += 1);
        self.metrics.in_flight(1);
        InFlight(self.clone())
    }

    /// Resolves once the connection has had no request in flight for `idle` in a row: from
    /// when it opened, or from when its last response ended.
    pub async fn idle_for(&self, idle: Duration) {
        let mut requests = self.requests.subscribe();
        loop {
            let busy = *requests.borrow_and_update() > 0;
            // Every begin and end is a change, so a request that comes and goes restarts the
            // wait. The sender lives in `self`: `changed` cannot fail.
            if busy {
                let _ = requests.changed().await;
            } else if tokio::time::timeout(idle, requests.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// A request in flight; dropping it ends the request.
pub struct InFlight(Activity);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.requests.send_modify(|n| *n -= 1);
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
