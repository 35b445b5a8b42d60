//! The HTTP door on a real socket: keys and scopes (`auth`), idempotent invocations
//! (`idempotency`), invocations and their answers (`invoke`), probes, limits and metrics (`ops`),
//! resumable streams (`resume`), topics over HTTP (`topics`).

mod auth;
mod idempotency;
mod invoke;
mod ops;
mod resume;
mod topics;
