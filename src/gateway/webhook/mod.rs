//! Signed webhooks: `metadata.webhook.routes` on the HTTP listener. A delivery is verified,
//! deduplicated by its id across replicas, queued durably on the route's reserved topic and
//! answered 202; a worker runs the route's skill from the queue with retries and a dead-letter
//! topic.
//!
//! - [`door`]: the door: its routes on the HTTP listener and its workers.
//! - [`routes`]: the routes the main skill declares.
//! - [`intake`]: receiving a delivery.
//! - [`worker`]: running queued deliveries.
//!
//! The signature schemes (Standard Webhooks, GitHub, Stripe, plain HMAC) are the gateway's
//! ([`crate::gateway::signature`]): Slack's requests are checked with them too.

pub mod door;
pub mod intake;
pub mod routes;
pub mod worker;

pub use door::Webhooks;
pub use routes::WebhookRoute;

/// The door's name (`nonlocals.gateway.transport`).
pub const NAME: &str = "webhook";
