//! A transport's durable queue: [`enqueue_once`] (the intake's once-only enqueue) and the
//! worker ([`spawn`]) that claims what the intake queued (webhook deliveries, Slack events,
//! mail), runs up to a number of them at once on the server's task tracker (so a shutdown
//! drains them), and stops taking new ones when the server stops.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::events::{Bus, Delivery, Event, KernelBus, KeyClaim};
use crate::gateway::Host;

/// How long one claim waits before it looks again.
const CLAIM_WAIT: Duration = Duration::from_secs(5);

/// What [`enqueue_once`] did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    Queued,
    /// Its key was claimed before (a retry, another replica): `queued` with the answer kept
    /// then, or `None` while that request is still queueing it.
    Duplicate {
        answer: Option<String>,
    },
}

/// Queues `event` durably once per `key` within `window`, on any replica: the key is claimed
/// first; if the event cannot be stored the claim is released, so the sender's retry can take
/// it; once stored the key keeps `answer` for the duplicates. An error means nothing was queued.
pub async fn enqueue_once(
    bus: &Bus,
    key: &str,
    fingerprint: &str,
    window: Duration,
    event: &Event,
    answer: &str,
) -> Result<Enqueued, String> {
    let store = bus.store();
    match store
        .claim_key(key, fingerprint, window)
        .await
        .map_err(|e| e.to_string())?
    {
        KeyClaim::Won => {}
        KeyClaim::Held { response, .. } => return Ok(Enqueued::Duplicate { answer: response }),
    }
    if let Err(err) = bus.emit(event).await {
        let _ = store.release_key(key).await;
        return Err(format!("queueing on `{}` failed: {err}", event.topic));
    }
    if let Err(err) = store.settle_key(key, answer, window).await {
        tracing::warn!(key, error = %err, "marking an event queued failed");
    }
    Ok(Enqueued::Queued)
}

/// Makes a transport's queue on `topic` before its intake takes anything (an event queued on a
/// topic with no queue would only be in its buffer).
pub async fn prepare(bus: &Bus, topic: &str, queue: &str) -> Result<(), String> {
    bus.subscribe_queue(topic, queue, false)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs `run` for each delivery claimed from `queue` of `topic`, `concurrency` at once, on the
/// server's background tracker until the server stops. `run` acks (or leaves the delivery to come back).
pub fn spawn<F, Fut>(host: &Host, topic: String, queue: &'static str, concurrency: usize, run: F)
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let bus = host.gateway.kernel.bus().clone();
    let (stop, tracker) = (host.stopping.clone(), &host.background);
    let runs = tracker.clone();
    tracker.spawn(async move {
        let slots = Arc::new(Semaphore::new(concurrency.max(1)));
        loop {
            let slot = tokio::select! {
                () = stop.cancelled() => return,
                slot = slots.clone().acquire_owned() => match slot { Ok(s) => s, Err(_) => return },
            };
            let got = tokio::select! {
                () = stop.cancelled() => return,
                got = bus.wait(&topic, queue, CLAIM_WAIT, 1, false) => got,
            };
            match got {
                Ok(deliveries) => {
                    let mut slot = Some(slot);
                    for delivery in deliveries {
                        // The slot taken for the claim goes with its delivery.
                        let held = slot.take().or_else(|| slots.clone().try_acquire_owned().ok());
                        let running = run(delivery);
                        runs.spawn(async move {
                            running.await;
                            drop(held);
                        });
                    }
                }
                Err(err) => {
                    tracing::warn!(topic, queue, error = %err, "claiming from a transport's queue failed; retrying");
                    drop(slot);
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    });
}
