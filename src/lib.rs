//! skillgate runs skills (markdown with YAML frontmatter, and native Rust tools) through an onion
//! middleware pipeline driven by cascading metadata.
//!
//! - [`context`]: the context of one invocation (envelope, args, locals, nonlocals, globals, run)
//!   and the manager operations on it: dotted `get`/`set`, serialization, abort, logs.
//! - [`kernel`]: the orchestrator: the eight invocation steps, the chain (`next`, `inject`),
//!   hooks, and the shared kernel state (registry, globals, log hub, schema cache).
//! - [`cascade`]: from a tool to its merged metadata and sorted middleware chain: authority,
//!   inherit (C3), `$merge`/`$remove`/`$order`/`$dynamic`/`$static`/`$hook`, interpolation,
//!   automatic static by strongly connected components.
//! - [`skills`]: tool definitions, skill files, search paths and shadowing, directive syntax,
//!   `allowed-tools` patterns.
//! - [`middleware`]: the built-in middleware and native tools, one module each.
//! - [`sandbox`]: the embedded JavaScript engine: `.skill.js` skills, the ctx bridge, limits,
//!   the untrusted-ref rule and sessions for untrusted code.
//! - [`events`]: the event bus: envelopes, the store traits (topics and queues, and the records
//!   beside them: claimed keys, schedules, subscriptions, sessions) with the memory store and
//!   one SQL implementation of the records for SQLite and Postgres, handler workers, and the
//!   `event-*` skills.
//! - [`mcp`]: MCP out: the skills as the tools of an MCP server over Streamable HTTP (`/mcp`)
//!   and stdio (`skillgate mcp`).
//! - [`session`]: the `session` middleware: per-key history of a skill's invocations, durable
//!   in the event store's database.
//! - [`gateway`]: the transports and the layer they share (verify, fill the context, announce,
//!   invoke, reply), `gateway-send`/`web-send`, metrics; the HTTP transport behind `serve`.
//! - [`agent`]: the LLM agent on top of the kernel: model providers' wire protocols.
//! - [`server`]: one server's doors (HTTP with the doors on its listener, email, Slack, MCP,
//!   webhooks, and any an embedding program adds) bound from its settings and run together.
//! - `contract` (feature `contract`): the transport contract suite, for doors written outside
//!   skillgate.
//! - [`builtins`]: the composition root: a kernel builder with every built-in tool, the event
//!   bus and the sandbox wired in (the binary and the tests start here).
//! - [`config`]: the project's configuration: `skillgate.yaml` with a section per transport
//!   and the store, `${env.NAME}` secrets, flags sharing each section's struct; every mistake
//!   reported at once.
//! - [`model_usage`]: model calls and tokens per provider and model, counted by the agent and
//!   shown at `/metrics`.
//! - [`telemetry`]: tracing output (text or JSON) and OpenTelemetry export from `OTEL_*`.
//! - [`cli`]: the `skillgate` command line.
//! - [`error`]: the one error type that unwinds through the onion.
//! - [`trust_table`]: who may run each built-in tool, as SECURITY.md shows it.
//! - [`shutdown`]: SIGINT/SIGTERM and the `shutdown` topic.
//! - [`schedule`]: skills fired on cron expressions or intervals, kept in the event store and
//!   fired once across replicas by `skillgate serve`.
//! - [`reload`]: hot reload of the skills, the main skill and the config file under `serve`.
//! - [`digest`]: hex text of bytes and of their SHA-256.
//! - [`tls`]: rustls for outbound connections, installed once for the process.

pub mod agent;
pub mod builtins;
pub mod cascade;
pub mod cli;
pub mod config;
pub mod context;
#[cfg(feature = "contract")]
pub mod contract;
pub mod cpus;
pub mod digest;
pub mod error;
pub mod events;
pub mod failure;
pub mod gateway;
pub mod json_text;
pub mod kernel;
pub mod markdown;
pub mod mcp;
pub mod middleware;
pub mod model_usage;
pub mod reload;
pub mod sandbox;
pub mod schedule;
pub mod server;
pub mod session;
pub mod shutdown;
pub mod skills;
pub mod telemetry;
pub mod tls;
pub mod trust_table;

pub use context::Context;
pub use error::{ErrorKind, Result, SkillError};
pub use kernel::{ContextSeed, InvokeOptions, Kernel, ToolRef};
