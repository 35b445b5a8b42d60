//! The Model Context Protocol, both ways, on the official Rust SDK (`rmcp`). Out: the
//! project's skills as the tools of an MCP server, over Streamable HTTP at `/mcp` (beside the
//! HTTP gateway, under its API keys and policy) and over stdio (`skillgate mcp`, for desktop
//! clients). In: the MCP servers skills mount (`client`).
//!
//! - `client`: MCP in (`metadata.mcp`, the `mcp` middleware's connections and tools).
//! - `server`: the handler: tools listed from the skills a caller may reach, with their params
//!   schemas; a call runs through the gateway core like any transport, and the run's events
//!   (an agent's included) reach the client as logging notifications while it runs.
//! - `http`: the Streamable HTTP service mounted at `/mcp`.
//! - `middleware`: `mcp`, the middleware that mounts a skill's servers.

pub mod client;
pub mod http;
pub mod middleware;
pub mod server;

pub use server::SkillServer;
