//! Security at the edge: one test per finding of the attacker's probe. Callers cannot steer the
//! pipeline, hostile skills cannot crash the server, and no input exhausts it.
//!
//! - `args`: `$`-prefixed keys in args from a transport or from untrusted code are refused.
//! - `sandbox`: JS values that cannot become JSON, CPU-bound scripts off the I/O workers.
//! - `http`: sockets, bodies, headers, metrics, `public/`, and small leaks of the HTTP edge.
//! - `bodies`: large request bodies being received wait for a budget every connection shares,
//!   and one client address holds at most its share of it.
//! - `kernel`: invocation depth, event handler timeouts, the log hub, ids, reserved topics,
//!   caller mistakes answered as 4xx.
//! - `trust`: the trust model: untrusted code, stored schedules and subscriptions, keys and
//!   their scopes, reserved topics (the caller rules run over every door in `transport`).
//! - `authority_props`: a property test that directive keys at any depth are never honored
//!   below the project, whoever names the tool and wherever the args were kept.
//! - `email`: hostile mail: forged senders, conversation hijack, HTML in answers.
//! - `webhook`: replays of deliveries whose scheme signs no timestamp.
//! - `rebinding`: DNS rebinding and cross-site requests on loopback, through every door.
//! - `budget`: fan-out bounded by each run's budget, event handlers included.
//! - `websocket`: clients that never read: bounded in bytes, let go, their queue freed; large
//!   messages being received wait for a budget every socket shares.
//! - `smtp`: raw SMTP clients: DATA past the cap, too many sessions, too much DATA at once.
//! - `streams`: parts a slow reader missed are told (`gap`); the sandbox queue is bounded.
//! - `peers`: per-address caps on connections and sockets; trusted proxies.
//! - `admission`: a client holding runs cannot take the last slots of the runs at once.
//! - `fuzz_peers`: bounded property tests over MIME, SMTP sessions, Slack bodies, WebSocket frames.
//! - `doors`: the caller rules over every door (the transport contract runs them) and MCP.
//! - `fuzz`: bounded property tests over HTTP args, frontmatter and skill bodies (JS values are
//!   fuzzed next to their conversion, in `src/sandbox/convert/fuzz.rs`).

mod admission;
mod args;
mod authority_props;
mod bodies;
mod budget;
pub(crate) mod doors;
mod email;
mod fuzz;
mod fuzz_peers;
mod http;
mod kernel;
mod peers;
mod rebinding;
mod sandbox;
mod smtp;
mod streams;
mod trust;
mod webhook;
mod websocket;
