//! Signed webhooks: `metadata.webhook.routes` on the HTTP listener. A delivery is verified,
//! deduplicated by its id across replicas, queued durably on the route's reserved topic and
//! answered 202; a worker runs the route's skill from the queue with retries and a dead-letter
//! topic.
//!
//! - [`verify`]: the signature schemes (Standard Webhooks, GitHub, Stripe, plain HMAC).
//! - [`routes`]: the routes the main skill declares.
//! - [`intake`]: receiving a delivery.
//! - [`worker`]: running queued deliveries.

pub mod intake;
pub mod routes;
pub mod verify;
pub mod worker;

pub use routes::WebhookRoute;
