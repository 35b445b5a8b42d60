//! The HTTP transport: `POST /invoke/{skill}` (JSON or SSE), `GET /skills[/{name}]`, custom
//! `web.routes`, `GET /events/{topic}` (a topic as SSE), `public/` files, `/healthz`, `/readyz`,
//! `/metrics`, `/openapi.yaml`, `/asyncapi.yaml` and `/docs`, behind API keys, a per-key rate limit, a body limit, timeouts and CORS.
//!
//! One module a concern: its settings are `crate::config::http`; [`server`] (router, layers,
//! shutdown), [`live`] (what a reload changes while it serves), [`listen`] (accept loop, connection cap, idle connections), [`activity`] (what is
//! in flight), [`body`] (the body deadline), [`descriptors`] (the cap's file descriptor
//! budget), [`invoke`], [`resume`] (resumable streamed runs), [`topics`], [`routes`], [`skills`], [`ops`],
//! [`ops_listener`] (`/healthz`, `/readyz`, `/metrics` on an address of their own), [`public`] (`public/` files),
//! [`auth`], [`hosts`] (the `Host` allow-list), [`origin`] (cross-site browsers), [`request_id`],
//! [`door`] (what a door served on this listener, such as the WebSocket endpoint, offers it), [`problem`] (how a `GatewayError` is answered: RFC 9457 problem documents), [`startup`] (why
//! the server could not start), [`openapi`] (the document and the docs page). Which skills a
//! caller may reach is the gateway's [`policy`](crate::gateway::policy).

mod activity;
pub mod auth;

mod console;
mod dead;
mod descriptors;
pub mod hosts;
pub mod idempotency;
pub mod invoke;
mod listen;
pub mod live;
pub mod openapi;
pub mod ops;
pub mod ops_listener;
pub mod project_openapi;
mod public;
pub mod request_id;
mod resume;
pub mod routes;
mod runs;
mod runs_stream;
pub mod server;
mod session_cookie;
pub mod skills;
pub mod startup;
pub mod state;
pub mod topics;

pub use crate::config::http::{HttpConfig, HttpSettings};
pub use live::{Applied, Reconfigure};
pub use ops_listener::OpsListener;
pub use server::{NAME, Server};
pub use startup::BindError;
