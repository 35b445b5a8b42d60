//! Bytes being received from clients (HTTP request bodies, WebSocket messages), held against a
//! budget every connection of a kind shares and against a share of it per client address.
//! What a peer sends arrives whole before it is handled, so without a budget every connection
//! could hold up to its size limit while slow or hostile clients dribble bytes in; and without
//! a share, one client could take the whole budget and make everyone else wait. A [`Claim`]
//! holds what one body or message needs: first from its client's share, then from the budget.
//! A claim that waits keeps the client's bytes unread (TCP backpressure); small ones are not
//! claimed at all (see the callers).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;

/// Bodies and messages up to this size are read without the budget: one connection holds at
/// most this much unbudgeted, and a normal request never waits behind large ones.
pub const FREE: usize = 16 * 1024;

/// The pace a body or message that holds the budget must keep: after a grace of a sixth of
/// `over` from the moment it held the budget, its bytes must keep arriving at no less than what
/// it holds over `over` (the body timeout, or the WebSocket idle timeout): its length, or for a
/// body of unknown length or a message in fragments the most it may be. A client that sends a
/// body of known length at that pace finishes within `over`, as the timeout asks anyway; one
/// that announces a large body and then stalls gives the budget back after the grace, not after
/// the whole timeout, so a few connections that send headers and nothing more cannot keep
/// everyone else's large bodies waiting.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    from: tokio::time::Instant,
    claimed: u64,
    over: Duration,
}

impl Pace {
    /// The pace of a claim of `claimed` bytes held from now, to arrive over `over`.
    pub fn new(claimed: usize, over: Duration) -> Pace {
        Pace {
            from: tokio::time::Instant::now(),
            claimed: claimed.max(1) as u64,
            over,
        }
    }

    /// How long a claim may receive nothing once it holds the budget.
    pub fn grace(&self) -> Duration {
        self.over / 6
    }

    /// The least bytes a second it must keep arriving at.
    pub fn rate(&self) -> u64 {
        let secs = self.over.as_secs_f64().max(0.001);
        (self.claimed as f64 / secs).ceil() as u64
    }

    /// When a claim that has received `received` bytes falls behind its pace.
    pub fn due(&self, received: u64) -> tokio::time::Instant {
        let share = received.min(self.claimed) as f64 / self.claimed as f64;
        self.from + self.grace() + self.over.mul_f64(share)
    }
}

/// A budget of bytes being received, with a share of it per client address.
pub struct Budget {
    bytes: Arc<Semaphore>,
    total: usize,
    /// What the connections of one client address may hold together.
    per_peer: usize,
    /// Each client address's share, while one of its claims lives.
    shares: Mutex<HashMap<IpAddr, Weak<Semaphore>>>,
    /// Bytes held now.
    pub held: Gauge<i64, AtomicI64>,
    /// Claims waiting now.
    pub waiting: Gauge<i64, AtomicI64>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("total", &self.total)
            .field("per_peer", &self.per_peer)
            .field("held", &self.held.get())
            .finish()
    }
}

impl Budget {
    /// A budget of `total` bytes (clamped to what a semaphore counts), of which one client
    /// address holds at most `per_peer`.
    pub fn new(
        total: usize,
        per_peer: usize,
        held: Gauge<i64, AtomicI64>,
        waiting: Gauge<i64, AtomicI64>,
    ) -> Arc<Budget> {
        let total = total.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Arc::new(Budget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            per_peer: per_peer.clamp(1, total),
            shares: Mutex::default(),
            held,
            waiting,
        })
    }

    /// The most one claim can hold: a client's share.
    pub fn per_peer(&self) -> usize {
        self.per_peer
    }

    /// The share `client`'s claims hold together (an IPv6 client's /64 network: see
    /// `peers::client_of`): the same one for each, for as long as one of them lives.
    fn share(&self, client: IpAddr) -> Arc<Semaphore> {
        let client = crate::gateway::peers::client_of(client);
        let mut shares = self.shares.lock();
        if let Some(share) = shares.get(&client).and_then(Weak::upgrade) {
            return share;
        }
        // Addresses whose claims all ended are forgotten.
        shares.retain(|_, share| share.strong_count() > 0);
        let share = Arc::new(Semaphore::new(self.per_peer));
        shares.insert(client, Arc::downgrade(&share));
        share
    }

    /// Client addresses with a claim now (or forgotten at the next new address).
    #[cfg(test)]
    pub(crate) fn addresses(&self) -> usize {
        self.shares.lock().len()
    }
}

/// What one connection's body or message holds of a [`Budget`], for one client address.
pub struct Claim {
    budget: Arc<Budget>,
    share: PollSemaphore,
    bytes: PollSemaphore,
    held_share: Option<OwnedSemaphorePermit>,
    held: Option<OwnedSemaphorePermit>,
    /// True while counted as waiting.
    waiting: bool,
}

impl Claim {
    /// A claim of `client` on `budget`, holding nothing yet.
    pub fn new(budget: Arc<Budget>, client: IpAddr) -> Claim {
        Claim {
            share: PollSemaphore::new(budget.share(client)),
            bytes: PollSemaphore::new(budget.bytes.clone()),
            budget,
            held_share: None,
            held: None,
            waiting: false,
        }
    }

    /// True while it holds bytes.
    pub fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// Ready once the claim holds `wanted` bytes (at most the client's share), first of the
    /// client's share, then of the budget. Waiting for the budget while holding the share
    /// keeps no other client waiting: the share is the client's own. A claim that holds
    /// bytes is ready at once; after [`Claim::release`] it asks anew, so a caller releases only
    /// when its body or message is done (or drops the claim), never to hold part and wait.
    pub fn poll_hold(&mut self, cx: &mut Context<'_>, wanted: usize) -> Poll<()> {
        if self.held.is_none() {
            let wanted = wanted.clamp(1, self.budget.per_peer) as u32;
            // `None` from either: closed (they never are); what it is for goes unbudgeted.
            if self.held_share.is_none() {
                match self.share.poll_acquire_many(cx, wanted) {
                    Poll::Pending => return self.wait(),
                    Poll::Ready(permit) => self.held_share = permit,
                }
            }
            match self.bytes.poll_acquire_many(cx, wanted) {
                Poll::Pending => return self.wait(),
                Poll::Ready(Some(permit)) => {
                    self.budget.held.inc_by(i64::from(wanted));
                    self.held = Some(permit);
                }
                Poll::Ready(None) => {}
            }
        }
        self.stop_waiting();
        Poll::Ready(())
    }

    /// Counted as waiting until [`Claim::stop_waiting`].
    fn wait(&mut self) -> Poll<()> {
        if !self.waiting {
            self.waiting = true;
            self.budget.waiting.inc();
        }
        Poll::Pending
    }

    fn stop_waiting(&mut self) {
        if self.waiting {
            self.waiting = false;
            self.budget.waiting.dec();
        }
    }

    /// What it holds goes back (the body or message arrived, or will not).
    pub fn release(&mut self) {
        if let Some(permit) = self.held.take() {
            self.budget.held.dec_by(permit.num_permits() as i64);
        }
        self.held_share = None;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.stop_waiting();
        self.release();
    }
}
