//! MCP out: the project's skills as the tools of a Model Context Protocol server, over
//! Streamable HTTP at `/mcp` (beside the HTTP gateway, under its API keys and policy) and over
//! stdio (`skillgate mcp`, for desktop clients). Built on the official Rust SDK (`rmcp`).
//!
//! - `server`: the handler: tools listed from the skills a caller may reach, with their params
//!   schemas; a call runs through the gateway core like any transport, and the run's events
//!   (an agent's included) reach the client as logging notifications while it runs.
//! - `http`: the Streamable HTTP service mounted at `/mcp`.

pub mod http;
pub mod server;

pub use server::SkillServer;
