//! The doors and the core they share. A door (a folder here: HTTP, WebSocket, webhooks, Slack,
//! email; MCP is `crate::mcp`) verifies an inbound message, then [`dispatch::Gateway::dispatch`]
//! fills the context, announces it, runs the routed skill and hands the reply parts back for
//! the door to deliver. The core (the files here and `policy/`) is what every door uses and
//! none owns; it names no door, and no door names another (`tests/suite/layers.rs`).
//!
//! - [`edge`]: what is refused of outside input before anything runs (`$` keys in args).
//! - [`policy`]: which skills a caller may reach, and how a failed run is told to it.
//! - [`principal`]: who a chat user, a mail sender or a webhook route is, as principals.
//! - [`error`]: [`GatewayError`], what the gateway answers instead of a result.
//! - [`problem`]: how a [`GatewayError`] is told to a peer (RFC 9457 problem documents).
//! - [`keys`]: API keys, the key ring, and the [`keys::Caller`] a door checked.
//! - [`peers`]: who a connection's client is (trusted proxies) and connections per client.
//! - [`body`]: a request body's deadline and what a body that cannot be read answers.
//! - [`headers`]: a request's headers as a run sees them.
//! - [`signature`]: HMAC signatures of signed deliveries (webhooks, Slack).
//! - [`dispatch`]: the shared steps 2–5 and the [`dispatch::Inbound`] every transport builds.
//! - [`reply`]: the reply channel, the raw response handle at `nonlocals.request.res`.
//! - [`send`]: the `gateway-send` and `web-send` tools.
//! - [`pace`]: a bytes-a-second pace many readers share, each woken once for its turn.
//! - [`receiving`]: bytes being received (bodies, messages), against a budget and a share of it
//!   per client address.
//! - [`metrics`]: Prometheus metrics of requests and invocations, shared by all transports.
//! - [`host`]: what every door runs on (gateway, policy, timeout, stopping, background work).
//! - [`transport`]: the lifecycle every transport shares (start, readiness, run, drain,
//!   report), and running them together.
//! - [`door`]: a door's life on a host, and a door run as a transport of its own.
//! - [`served`]: a door served on the HTTP listener, and what the listener shares with it.
//! - [`restart`]: settings a reload keeps as they run, named for the next start.
//! - [`origin`]: cross-site browser requests refused.
//! - [`http`]: the HTTP transport (`skillgate serve`).
//! - [`ws`]: the WebSocket transport, `/ws` on the HTTP listener.
//! - [`webhook`]: signed webhooks, queued and run from the event store.
//! - [`slack`]: Slack (Events API on the HTTP listener, Socket Mode on its own).
//! - [`email`]: mail in over SMTP or IMAP, answers out through a relay.
//! - [`queue`]: the durable queues of the queued doors: once-only enqueue, typed and versioned
//!   jobs, and the one worker that claims and runs them.

pub mod admission;
pub mod body;
pub mod dispatch;
pub mod door;
pub mod edge;
pub mod email;
pub mod error;
pub mod headers;
pub mod host;
pub mod http;
pub mod keys;
pub mod metrics;
pub mod origin;
pub mod pace;
pub mod peers;
pub mod policy;
pub mod principal;
pub mod problem;
pub mod queue;
pub mod receiving;
pub mod reply;
pub mod restart;
pub mod send;
pub mod served;
pub mod signature;
pub mod slack;
pub mod transport;
pub mod webhook;
pub mod ws;

pub use dispatch::{Dispatch, Gateway, Inbound};
pub use error::GatewayError;
pub use host::Host;
pub use reply::{Reply, ReplyPart};
