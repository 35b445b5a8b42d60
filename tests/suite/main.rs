//! The integration suite, one binary (one link) for all of it, a folder per feature.
//!
//! `support/` holds what the tests share: a throwaway project folder and the `skillgate` binary
//! (`common`), a server on a real socket (`server`), a served process (`process`), where events
//! are kept (`stores`), and local peers speaking the real protocols (DNS, the model APIs, Slack,
//! SMTP, a WebSocket client).
//!
//! - `context/`: spec 01, one test per rule of the context object and its manager, a file per
//!   part of the spec.
//! - `orchestration/`: spec 02, invocation, cascade, chain, return and error rules, a file per
//!   part of the spec.
//! - `hooks`: the Hooks part of spec 03.
//! - `agent/`: spec 05, the agent against the fake model server, and each model provider's
//!   wire protocol (`model_openai`, `model_anthropic`, `model_bedrock`).
//! - `events/`: the event store contract on every store, its command line, event routes, and
//!   what the durable stores promise under stress; `schedules`, `sessions` beside it.
//! - `http/`, `ws/`, `slack/`, `email/`, `webhook/`, `mcp/`: each door on real sockets against
//!   real clients (or local peers speaking the real protocol).
//! - `transport/`: the contract every door passes, one harness per door (the example door of
//!   `examples/jsonl_door` included).
//! - `no_http`: email and Slack Socket Mode without HTTP, and the operations listener.
//! - `serve_cli`, `cli`: `skillgate serve` as a process (signals, config, OTLP export), and the
//!   command line over the skill tree in `tests/fixtures/`.
//! - `runs/`: the runs record: its store contract on every store, runs from each door read
//!   back over `GET /runs` (who sees which, redaction, a store that is down), `skillgate runs`.
//! - `sandbox/`: `.skill.js` skills, the ctx bridge, sandbox limits, escapes and sessions.
//! - `security/`: one test per finding of the security probes, and bounded fuzzing.
//! - `layers`: every module on its floor, no door naming another.
//! - `readme`: the README's contents list against its headings.
//! - `binary`: the built binary's link settings, read off its ELF file (Linux with glibc).
//! - `directives`, `deep`, `smoke`, `config_middleware`, `reload`, `replicas`, `deploy`,
//!   `api_description`: the directives of a markdown body, deep chains on an ordinary stack, a
//!   smoke test of the helpers, config middleware, hot reload, replicas on one Postgres, the
//!   deploy files, schemathesis against the served API documents.

mod agent;
mod api_description;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod binary;
mod cli;
mod config_middleware;
mod console;
mod context;
mod deep;
mod deploy;
mod directives;
pub(crate) mod email;
mod events;
mod figures;
mod hooks;
mod http;
mod layers;
mod mcp;
mod no_http;
mod orchestration;
mod readme;
mod reload;
mod reload_settings;
mod replicas;
mod rolling_restart;
mod runs;
mod sandbox;
mod schedules;
mod security;
mod serve_cli;
mod sessions;
mod slack;
mod smoke;
mod support;
mod transport;
pub(crate) mod webhook;
mod ws;
