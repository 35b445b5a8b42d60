//! The integration suite, one binary (one link) for all of it.
//!
//! `common` holds the helpers the modules share: a throwaway project folder, recorders, the
//! recording pipeline tools, and the `skillgate` binary run as a process.
//!
//! - `context/`: spec 01, one test per rule of the context object and its manager, a file per
//!   part of the spec: `properties_envelope`, `properties_state`, `properties_run`,
//!   `manager_chain`, `manager_invoke`, `manager_get_set`, `manager_logs`, `target_context`,
//!   `serialization` (shared helpers in `context/mod.rs`).
//! - `orchestration/`: spec 02, invocation, cascade, chain, return and error rules, a file per
//!   part of the spec: `invocation_step1_dollar_names`, `invocation_step2_resolve_ref`,
//!   `invocation_steps3_to_5_child_context`, `invocation_step6_authority`,
//!   `invocation_step7_cascade`, `middleware_sources`, `middleware_chain`, `dynamic_injection`,
//!   `chain_cycles`, `automatic_static`, `execution_flow_and_returns`, `error_handling`.
//! - `hooks`: the Hooks part of spec 03.
//! - `events`, `events_cli`, `durability`: the event store contract, its command line, and what
//!   the durable stores promise under stress.
//! - `directives`, `deep`, `smoke`: the directives of a markdown body, deep invocation chains on
//!   an ordinary thread stack, a smoke test of the helpers.
//! - `cli`: the command line end to end over the skill tree in `tests/fixtures/`.
//! - `http_invoke`, `http_auth`, `http_ops`: the HTTP gateway on a real socket (`server` helps).
//! - `serve_cli`: `skillgate serve` as a process: signals, config, OTLP export.
//! - `sandbox/`: `.skill.js` skills, the ctx bridge, sandbox limits, escapes and sessions, a
//!   file per part: `skill_js`, `js_middleware`, `cli`, `limits`, `escapes`, `sessions`,
//!   `running_untrusted_code`.
//! - `security`: one test per finding of the security probe, and bounded fuzzing.
//! - `layers`: the bottom layers (context, cascade, skills, kernel) name nothing above them.
//! - `transport`: the contract every transport passes, one harness per transport (the example
//!   door of `examples/jsonl_door` included).
//! - `no_http`: email and Slack Socket Mode without HTTP, and the operations listener.
//! - `api_description`: schemathesis against both served API documents.

mod agent;
mod api_description;
mod cli;
mod common;
mod config_middleware;
mod context;
mod deep;
mod deploy;
mod directives;
mod dns_fake;
mod durability;
pub(crate) mod email;
mod event_routes;
mod events;
mod events_cli;
mod hooks;
mod http_auth;
mod http_idempotency;
mod http_invoke;
mod http_ops;
mod http_resume;
mod http_topics;
mod imap;
mod layers;
mod mcp;
mod mcp_in;
mod model_anthropic;
mod model_bedrock;
mod model_fake;
mod model_openai;
mod no_http;
mod orchestration;
mod process;
mod reload;
mod replicas;
mod sandbox;
mod schedules;
mod security;
mod serve_cli;
mod server;
mod sessions;
mod slack;
mod slack_fake;
mod smoke;
mod smtp_sink;
mod transport;
pub(crate) mod webhook;
mod websocket;
mod ws_client;
