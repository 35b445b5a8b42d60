//! MCP in: the servers skills mount with `metadata.mcp` (stdio commands and Streamable HTTP
//! endpoints), one connection per server for the whole process, their tools layered into the
//! index of the skill that mounts them (and so of what it invokes) as `<mount>-<tool>`.
//!
//! - `mount`: reads and checks `metadata.mcp`.
//! - `server`: one server's connection: made on first use, made again when found closed, its
//!   tools listed again when the server says they changed.
//! - `tools`: a server's tools as skillgate tools, and a call's answer as a result.

pub mod mount;
pub mod server;
pub mod tools;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use crate::error::{ErrorKind, Result, SkillError};
use crate::skills::index::Layered;
use mount::{Mount, ServerSpec};
use server::Server;

/// At most this many distinct servers per process (a spec built from args could otherwise
/// start a process per invocation).
const MAX_SERVERS: usize = 64;

/// The servers this process is a client of, by how each is reached (`globals.tools` of the
/// spec: MCP connections live as long as the process).
#[derive(Default)]
pub struct Pool {
    servers: Mutex<HashMap<ServerSpec, Arc<Server>>>,
}

impl Pool {
    pub fn new() -> Pool {
        Pool::default()
    }

    fn server(&self, spec: &ServerSpec) -> Result<Arc<Server>> {
        let mut servers = self.servers.lock();
        if let Some(server) = servers.get(spec) {
            return Ok(server.clone());
        }
        if servers.len() >= MAX_SERVERS {
            return Err(SkillError::new(
                ErrorKind::Config,
                format!(
                    "cannot mount MCP server {}: this process is already a client of {MAX_SERVERS} servers",
                    spec.describe()
                ),
            ));
        }
        let server = Arc::new(Server::new(spec.clone()));
        servers.insert(spec.clone(), server.clone());
        Ok(server)
    }

    /// Connects to each mounted server (when not connected yet) and returns their tools, to be
    /// layered into an index, and what `locals.config.mcp` says of them:
    /// `{ <mount>: { server, tools: [names] } }`.
    pub async fn mount(&self, mounts: &[Mount]) -> Result<(Layered, Value)> {
        let mut all: Vec<Layered> = Vec::with_capacity(mounts.len());
        let mut summary = Map::new();
        for mount in mounts {
            let server = self.server(&mount.spec)?;
            let conn = server.connection().await?;
            let tools = {
                let mut listed = conn.listed.lock();
                match listed.mounted.iter().find(|(m, _)| m == mount) {
                    Some((_, tools)) => tools.clone(),
                    None => {
                        let tools = tools::tools_of(&server, mount, &listed.tools);
                        listed.mounted.push((mount.clone(), tools.clone()));
                        tools
                    }
                }
            };
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            summary.insert(
                mount.name.clone(),
                json!({ "server": mount.spec.describe(), "tools": names }),
            );
            all.push(tools);
        }
        let layered = match all.len() {
            1 => all.pop().expect("one"),
            _ => all.iter().flat_map(|t| t.iter().cloned()).collect(),
        };
        Ok((layered, Value::Object(summary)))
    }
}
