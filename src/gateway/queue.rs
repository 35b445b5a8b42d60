//! A door's durable queue: [`enqueue_once`] (the intake's once-only enqueue) and the worker
//! ([`spawn_jobs`]) that claims what the intake queued (webhook deliveries, Slack events, mail)
//! as the door's typed [`Job`], runs up to a number of them at once on the server's task
//! tracker (so a shutdown drains them), and stops taking new ones when the server stops.
//!
//! A job is queued as its fields and its version (`"v"`); a payload without a version was
//! queued by a release before versions, in the same field names, and runs as it is.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::events::{Bus, Claim, Delivery, Event, KernelBus, KeyClaim};
use crate::gateway::{Gateway, Host};

/// How long one claim waits before it looks again.
const CLAIM_WAIT: Duration = Duration::from_secs(5);

/// The payload of a door's queued work.
pub trait Job: Serialize + DeserializeOwned + Send + 'static {
    /// Written as `"v"` beside the fields. Raise it when a field changes meaning, and read the
    /// payloads of the versions before it in [`Job::upgrade`].
    const VERSION: u64;

    /// A payload of an earlier version (`0`: queued before payloads had versions); by default
    /// read as this version, for field names that did not change.
    fn upgrade(version: u64, data: Value) -> Result<Self, String> {
        let _ = version;
        serde_json::from_value(data).map_err(|e| e.to_string())
    }
}

/// What a chat or mail door decided for a message, queued with it: the skill, its args,
/// whether the sender named it (a command: the policy decides whether it may run) and whether
/// a command route's `skills` left the name out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Routed {
    pub skill: String,
    pub args: Value,
    pub named: bool,
    pub refused: bool,
}

/// `job` as an event's data: its fields and its version.
pub fn encode<J: Job>(job: &J) -> Value {
    let mut data = serde_json::to_value(job).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut data {
        map.insert("v".into(), J::VERSION.into());
    }
    data
}

/// A queued payload as the job it is: this version's, an earlier one's (upgraded), never a
/// later one's (queued by a newer replica: left for it).
pub fn decode<J: Job>(data: Option<&Value>) -> Result<J, String> {
    let mut data = data.cloned().unwrap_or(Value::Null);
    let version = match &mut data {
        Value::Object(map) => match map.remove("v") {
            None => 0,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("the version `{v}` is not a number"))?,
        },
        other => return Err(format!("the payload is not an object: {other}")),
    };
    match version {
        v if v == J::VERSION => serde_json::from_value(data).map_err(|e| e.to_string()),
        v if v < J::VERSION => J::upgrade(v, data),
        v => Err(format!(
            "version {v} is newer than this release reads ({})",
            J::VERSION
        )),
    }
}

/// Where a door's jobs wait: the topic, its queue, and how many of them run at once.
pub struct Lane {
    pub topic: String,
    pub queue: &'static str,
    pub concurrency: usize,
}

impl Lane {
    pub fn new(topic: impl Into<String>, queue: &'static str, concurrency: usize) -> Lane {
        Lane {
            topic: topic.into(),
            queue,
            concurrency,
        }
    }
}

/// [`spawn`] for a door's typed jobs: each delivery's payload is read as `J` and run with the
/// host and the door's `state`, on the server's background tracker until the server stops (its
/// runs are tracked there too). One that cannot be read is logged and not acked: it comes back
/// until the delivery limit moves it to `<topic>.dead`, where an operator finds it.
pub fn spawn_jobs<S, J, F, Fut>(host: &Host, lane: Lane, state: Arc<S>, run: F)
where
    S: Send + Sync + 'static,
    J: Job,
    F: Fn(Host, Arc<S>, J, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let name = lane.topic.clone();
    let worker = host.clone();
    spawn(
        host,
        lane.topic,
        lane.queue,
        lane.concurrency,
        move |delivery| match decode::<J>(delivery.event.data.as_ref()) {
            Ok(job) => Either::Left(run(worker.clone(), state.clone(), job, delivery)),
            Err(err) => {
                tracing::error!(
                    topic = name,
                    id = delivery.event.id,
                    attempt = delivery.attempts,
                    error = %err,
                    "a queued payload cannot be read; it goes to the dead letters at its delivery limit"
                );
                Either::Right(std::future::ready(()))
            }
        },
    );
}

/// What [`enqueue_once`] did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    Queued,
    /// Its key was claimed before (a retry, another replica), with the answer kept then
    /// (`None` only for a key claimed some other way than by queueing).
    Duplicate {
        answer: Option<String>,
    },
}

/// Queues `event` durably once per `key` within `window`, on any replica: the claim on the
/// key, the event and `answer` (what the duplicates are told) are committed together, so an
/// error, a crash or a sender that hangs up never leaves a key held with nothing queued. An
/// error means nothing was queued and the key is free.
pub async fn enqueue_once(
    bus: &Bus,
    key: &str,
    fingerprint: &str,
    window: Duration,
    event: &Event,
    answer: &str,
) -> Result<Enqueued, String> {
    // One commit: the key claimed, the event queued and the answer kept, or none of them.
    let claim = Claim {
        key: key.to_string(),
        fingerprint: fingerprint.to_string(),
        ttl: window,
        answer: answer.to_string(),
    };
    match bus
        .emit_claimed(&claim, std::slice::from_ref(event))
        .await
        .map_err(|err| format!("queueing on `{}` failed: {err}", event.topic))?
    {
        KeyClaim::Won => Ok(Enqueued::Queued),
        KeyClaim::Held { response, .. } => Ok(Enqueued::Duplicate { answer: response }),
    }
}

/// Makes a transport's queue on `topic` before its intake takes anything (an event queued on a
/// topic with no queue would only be in its buffer).
pub async fn prepare(gateway: &Gateway, lane: &Lane) -> Result<(), String> {
    gateway
        .kernel
        .bus()
        .subscribe_queue(&lane.topic, lane.queue, false)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs `run` for each delivery claimed from `queue` of `topic`, `concurrency` at once, on the
/// server's background tracker until the server stops. `run` acks (or leaves the delivery to come back).
fn spawn<F, Fut>(host: &Host, topic: String, queue: &'static str, concurrency: usize, run: F)
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

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Two {
        name: String,
        count: u64,
    }

    impl Job for Two {
        const VERSION: u64 = 2;

        /// Version 1 called `count` `n`.
        fn upgrade(version: u64, mut data: Value) -> Result<Self, String> {
            if version == 1
                && let Some(n) = data.as_object_mut().and_then(|m| m.remove("n"))
            {
                data["count"] = n;
            }
            serde_json::from_value(data).map_err(|e| e.to_string())
        }
    }

    #[test]
    fn a_job_is_queued_with_its_version_and_read_back() {
        let job = Two {
            name: "a".into(),
            count: 3,
        };
        let data = encode(&job);
        assert_eq!(data, json!({ "name": "a", "count": 3, "v": 2 }));
        assert_eq!(decode::<Two>(Some(&data)).unwrap(), job);
    }

    #[test]
    fn earlier_versions_are_upgraded_and_an_unversioned_payload_is_version_zero() {
        let v1 = json!({ "name": "a", "n": 4, "v": 1 });
        assert_eq!(decode::<Two>(Some(&v1)).unwrap().count, 4);
        let unversioned = json!({ "name": "b", "count": 5 });
        assert_eq!(decode::<Two>(Some(&unversioned)).unwrap().count, 5);
    }

    #[test]
    fn a_later_version_or_a_payload_that_is_not_an_object_is_refused() {
        let later = json!({ "name": "a", "count": 1, "v": 3 });
        let err = decode::<Two>(Some(&later)).unwrap_err();
        assert!(err.contains("version 3"), "{err}");
        assert!(decode::<Two>(Some(&json!("text"))).is_err());
        assert!(decode::<Two>(None).is_err());
    }
}
