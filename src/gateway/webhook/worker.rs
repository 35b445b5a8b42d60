//! Running queued deliveries: one worker per route claims deliveries from its queue and runs
//! the route's skill through the shared dispatch (`gateway-message` announced,
//! `nonlocals.request` filled), a few at once. A run that succeeds acks its delivery; one that
//! fails leaves it to come back after the visibility timeout, until the delivery limit moves it
//! to `<topic>.dead`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::context::id;
use crate::events::{Delivery, KernelBus};
use crate::gateway::Host;
use crate::gateway::Inbound;
use crate::gateway::queue::Lane;
use crate::gateway::reply::gather;
use crate::gateway::webhook::routes::WebhookRoute;
use crate::kernel::ToolRef;
use crate::kernel::authority::Authority;

/// The queue of a route's topic that its worker claims from.
pub const QUEUE: &str = "run";
/// Deliveries of one route running at once.
const CONCURRENCY: usize = 8;

/// A delivery as the intake queues it on the route's topic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Queued {
    pub delivery_id: String,
    pub path: String,
    /// The signature scheme it was verified by.
    pub scheme: String,
    pub headers: Value,
    /// The body, as JSON when it is JSON, else as text.
    pub body: Value,
    pub received_at: u64,
}

impl crate::gateway::queue::Job for Queued {
    const VERSION: u64 = 1;
}

/// Where the route's deliveries wait (its topic's queue, made before any is taken: a delivery
/// queued on a topic with no queue would only be in its buffer), and how many run at once.
pub fn lane(route: &WebhookRoute) -> Lane {
    Lane::new(route.topic.clone(), QUEUE, CONCURRENCY)
}

/// Runs one delivery; acks it when the skill succeeded.
pub async fn run(host: Host, route: Arc<WebhookRoute>, queued: Queued, delivery: Delivery) {
    let (gateway, timeout) = (&host.gateway, host.timeout);
    let delivery_id = queued.delivery_id;
    let args = json!({
        "id": delivery_id,
        "path": route.path,
        "scheme": route.scheme.name(),
        "headers": queued.headers,
        "body": queued.body,
        "attempt": delivery.attempts,
    });
    let mut request = Map::new();
    request.insert("transport".into(), json!("webhook"));
    request.insert("method".into(), json!("POST"));
    request.insert("path".into(), json!(route.path));
    request.insert("headers".into(), queued.headers);
    request.insert("deliveryId".into(), json!(delivery_id));
    let request_id = id::format(id::next_id());
    // The route is the project's; the sender is the route's principal, whose body is data.
    let authority = Authority::serving(crate::gateway::principal::peer(&format!(
        "webhook:{}",
        route.path
    )));
    let inbound = Inbound {
        transport: super::NAME,
        skill: ToolRef::Name(Arc::from(route.skill.as_str())),
        tool: None,
        authority,
        announce: Some(json!({
            "path": route.path,
            "deliveryId": delivery_id,
            "scheme": route.scheme.name(),
            "attempt": delivery.attempts,
        })),
        args,
        request,
        request_id: request_id.clone(),
        reply_to: json!({ "path": route.path, "deliveryId": delivery_id }),
        follow: false,
        timeout: Some(timeout),
        duplex: false,
        session: None,
        // Queued: bounded by the worker, not by a client's share.
        client: None,
    };
    let mut dispatch = gateway.dispatch(inbound);
    let outcome = gather(&mut dispatch.parts).await.outcome;
    match outcome {
        Some(Ok(_)) => {
            let receipts = [delivery.receipt];
            if let Err(err) = gateway
                .kernel
                .bus()
                .ack(&route.topic, QUEUE, &receipts, false)
                .await
            {
                tracing::warn!(delivery_id, error = %err, "acking a webhook delivery failed; it may run again");
            }
        }
        Some(Err(err)) => tracing::warn!(
            path = route.path,
            delivery_id,
            request_id,
            attempt = delivery.attempts,
            error = %err,
            "a webhook delivery failed; it comes back after the visibility timeout"
        ),
        None => tracing::warn!(delivery_id, "a webhook run ended without an outcome"),
    }
}
