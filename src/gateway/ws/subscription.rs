//! Topic subscriptions of one socket: a plain subscription follows the topic's durable buffer
//! (resumable with `from`, every event with its durable id); a group subscription takes events
//! from a consumer group's queue, at most [`PREFETCH`] unacked at once, which the client acks or
//! nacks by id. Unacked events of a socket that closes go back to the front of their queue.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::sync::CancellationToken;

use crate::events::tail::FollowError;
use crate::events::{Bus, KernelBus};
use crate::gateway::GatewayError;
use crate::gateway::ws::outbox::{Outbox, code};
use crate::gateway::ws::protocol::{Subscribe, out};
use crate::kernel::Kernel;
use crate::kernel::authority::Principal;

/// Events of a group subscription handed to the client and not yet acked.
pub const PREFETCH: usize = 64;
/// How long one claim waits for events before it looks again.
const CLAIM_WAIT: Duration = Duration::from_secs(5);

/// An event a group member holds: where to ack it, and its prefetch slot.
struct Held {
    topic: String,
    group: String,
    receipt: u64,
    _slot: OwnedSemaphorePermit,
}

/// The subscriptions of one socket.
pub struct Subscriptions {
    bus: Arc<Bus>,
    outbox: Arc<Outbox>,
    /// Topic → what stops its forwarder.
    active: HashMap<String, CancellationToken>,
    /// The forwarders, to wait for before held events are handed back.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    held: Arc<Mutex<HashMap<String, Held>>>,
}

impl Subscriptions {
    pub fn new(kernel: &Kernel, outbox: Arc<Outbox>) -> Subscriptions {
        Subscriptions {
            bus: kernel.bus().clone(),
            outbox,
            active: HashMap::new(),
            tasks: Vec::new(),
            held: Arc::default(),
        }
    }

    /// Subscribes for `principal`: a group is a queue of its own (another principal's group of
    /// the same name is another queue), except for an `admin` key, which names queues as they
    /// are.
    pub fn subscribe(&mut self, frame: Subscribe, principal: &Principal) {
        let Subscribe { topic, group, from } = frame;
        let group = group.map(|g| Group {
            queue: crate::events::owned_queue(principal, &g),
            name: g,
        });
        if self.active.contains_key(&topic) {
            self.outbox.push(out::error(
                None,
                &GatewayError::BadRequest(format!(
                    "already subscribed to `{topic}` on this socket (unsubscribe first)"
                )),
            ));
            return;
        }
        let stop = CancellationToken::new();
        self.active.insert(topic.clone(), stop.clone());
        let bus = self.bus.clone();
        let outbox = self.outbox.clone();
        let task = match group {
            None => tokio::spawn(follow(bus, outbox, topic, from, stop)),
            Some(group) => {
                let held = self.held.clone();
                tokio::spawn(consume(bus, outbox, held, topic, group, stop))
            }
        };
        self.tasks.retain(|t| !t.is_finished());
        self.tasks.push(task);
    }

    pub fn unsubscribe(&mut self, topic: &str) {
        match self.active.remove(topic) {
            Some(stop) => {
                stop.cancel();
                self.outbox.push(out::unsubscribed(topic));
            }
            None => self.outbox.push(out::error(
                None,
                &GatewayError::BadRequest(format!("not subscribed to `{topic}`")),
            )),
        }
    }

    /// Acks (or nacks) an event a group subscription handed out.
    pub async fn settle(&self, event_id: &str, nack: bool) {
        let held = self.held.lock().remove(event_id);
        let Some(held) = held else {
            self.outbox.push(out::error(
                None,
                &GatewayError::BadRequest(format!(
                    "event `{event_id}` is not held by this socket (acked already, or not from a group subscription)"
                )),
            ));
            return;
        };
        if let Err(err) = self
            .bus
            .ack(&held.topic, &held.group, &[held.receipt], nack)
            .await
        {
            self.outbox
                .push(out::error(None, &GatewayError::BadRequest(err.to_string())));
        }
    }

    /// Stops every subscription (the socket is closing, or the server is).
    pub fn stop_all(&mut self) {
        for (_, stop) in self.active.drain() {
            stop.cancel();
        }
    }

    /// Stops every subscription, waits for their forwarders, and returns every held event to
    /// the front of its queue, for the next member.
    pub async fn release_held(&mut self) {
        self.stop_all();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        let held: Vec<(String, Held)> = self.held.lock().drain().collect();
        for (_, held) in held {
            let _ = self
                .bus
                .ack(&held.topic, &held.group, &[held.receipt], true)
                .await;
        }
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// A plain subscription: the topic from `from` (or from now), live.
async fn follow(
    bus: Arc<Bus>,
    outbox: Arc<Outbox>,
    topic: String,
    from: Option<String>,
    stop: CancellationToken,
) {
    let mut follow = match bus.follow(&topic, from.as_deref()).await {
        Ok(follow) => follow,
        Err(err) => {
            outbox.push(out::error(None, &GatewayError::BadRequest(err.to_string())));
            return;
        }
    };
    outbox.push(out::subscribed(&topic, None, follow.resumed_with_gap));
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return,
            next = follow.next() => next,
        };
        match next {
            Ok(tailed) => outbox.push_frame(
                tailed.rendered(|tailed| Utf8Bytes::from(out::followed_event(&topic, tailed))),
            ),
            Err(FollowError::Gap) => outbox.push(out::gap(&topic)),
            Err(FollowError::Lagged(n)) => {
                outbox.close(
                    code::TRY_AGAIN_LATER,
                    format!("the client fell behind `{topic}` by {n} events"),
                );
                return;
            }
            Err(FollowError::Closed) => return,
        }
    }
}

/// A consumer group as the client named it, and the queue it is for its principal.
struct Group {
    name: String,
    queue: String,
}

/// A group subscription: claims what the prefetch allows, hands it out, and waits for acks.
async fn consume(
    bus: Arc<Bus>,
    outbox: Arc<Outbox>,
    held: Arc<Mutex<HashMap<String, Held>>>,
    topic: String,
    group: Group,
    stop: CancellationToken,
) {
    let Group { name, queue: group } = group;
    if let Err(err) = bus.subscribe_queue(&topic, &group, false).await {
        outbox.push(out::error(None, &GatewayError::BadRequest(err.to_string())));
        return;
    }
    outbox.push(out::subscribed(&topic, Some(&name), false));
    let slots = Arc::new(Semaphore::new(PREFETCH));
    loop {
        let first = tokio::select! {
            () = stop.cancelled() => return,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let max = 1 + slots.available_permits();
        let got = tokio::select! {
            () = stop.cancelled() => return,
            got = bus.wait(&topic, &group, CLAIM_WAIT, max, false) => got,
        };
        let deliveries = match got {
            // Stopped while claiming: what was claimed goes back at once.
            Ok(deliveries) if stop.is_cancelled() => {
                let receipts: Vec<u64> = deliveries.into_iter().map(|d| d.receipt).collect();
                let _ = bus.ack(&topic, &group, &receipts, true).await;
                return;
            }
            Ok(deliveries) => deliveries,
            Err(err) => {
                tracing::warn!(topic, group, error = %err, "claiming for a WebSocket group failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut first = Some(first);
        for delivery in deliveries {
            let slot = match first.take() {
                Some(slot) => slot,
                None => match slots.clone().try_acquire_owned() {
                    Ok(slot) => slot,
                    // Claimed more than the prefetch allows: it comes back to the queue.
                    Err(_) => {
                        let _ = bus.ack(&topic, &group, &[delivery.receipt], true).await;
                        continue;
                    }
                },
            };
            let mut frame = out::topic_event(&topic, Some(&name), &delivery.event);
            frame["attempts"] = delivery.attempts.into();
            let duplicate = {
                let mut held = held.lock();
                if held.contains_key(&delivery.event.id) {
                    true
                } else {
                    held.insert(
                        delivery.event.id.clone(),
                        Held {
                            topic: topic.clone(),
                            group: group.clone(),
                            receipt: delivery.receipt,
                            _slot: slot,
                        },
                    );
                    false
                }
            };
            if duplicate {
                // Frames name events by id: a second event with the id of one this socket
                // holds is left claimed, and comes back after its visibility timeout.
                continue;
            }
            outbox.push(frame);
        }
    }
}
