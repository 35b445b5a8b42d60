//! MCP in: the servers skills mount with `metadata.mcp` (stdio commands and Streamable HTTP
//! endpoints), one connection per server for the whole process, their tools layered into the
//! index of the skill that mounts them (and so of what it invokes) as `<mount>-<tool>`.
//!
//! - `mount`: reads and checks `metadata.mcp`.
//! - `server`: one server's connection: made on first use, made again when found closed, its
//!   tools listed again when the server says they changed, closed when idle.
//! - `tools`: a server's tools as skillgate tools, and a call's answer as a result.

pub mod mount;
pub mod server;
pub mod tools;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use crate::error::{Result, SkillError};
use crate::skills::index::Layered;
use mount::{Mount, ServerSpec};
use server::Server;

/// At most this many distinct servers per process (a spec built from args could otherwise
/// start a process per invocation). At the cap, the least recently used server with no call
/// under way is closed and forgotten to make room (edits and reloads that change a mount leave
/// servers nothing mounts any more).
const MAX_SERVERS: usize = 64;

/// How long a connection nothing uses stays open by default.
pub const IDLE: Duration = Duration::from_secs(600);

type Servers = Arc<Mutex<HashMap<ServerSpec, Arc<Server>>>>;

/// The servers this process is a client of, by how each is reached (`globals.tools` of the
/// spec). A connection unused for `idle` is closed (a stdio server's process ends; one a hot
/// reload left unmounted goes away) and made again on the next use.
pub struct Pool {
    servers: Servers,
    idle: Duration,
    reaper: OnceLock<()>,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::with_idle(IDLE)
    }
}

impl Pool {
    pub fn new() -> Pool {
        Pool::default()
    }

    /// A pool that closes connections unused for `idle`.
    pub fn with_idle(idle: Duration) -> Pool {
        Pool {
            servers: Arc::default(),
            idle,
            reaper: OnceLock::new(),
        }
    }

    /// Starts the task that closes idle connections (once, from within the runtime); it ends
    /// with the pool.
    fn start_reaper(&self) {
        self.reaper.get_or_init(|| {
            let servers = Arc::downgrade(&self.servers);
            let idle = self.idle;
            let every = (idle / 2).clamp(Duration::from_millis(10), Duration::from_secs(60));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(servers) = servers.upgrade() else {
                        return;
                    };
                    let all: Vec<Arc<Server>> = servers.lock().values().cloned().collect();
                    for server in all {
                        if server.close_if_idle(idle) {
                            // Mounted again, it is made again: an edit may have left it unused.
                            servers
                                .lock()
                                .retain(|_, s| !Arc::ptr_eq(s, &server) || s.is_connected());
                        }
                    }
                }
            });
        });
    }

    fn server(&self, spec: &ServerSpec) -> Result<Arc<Server>> {
        self.start_reaper();
        let mut servers = self.servers.lock();
        if let Some(server) = servers.get(spec) {
            return Ok(server.clone());
        }
        if servers.len() >= MAX_SERVERS {
            // Make room: the least recently used server that no call is using.
            let lru = servers
                .iter()
                .filter_map(|(spec, s)| Some((spec.clone(), s.unused_for()?, s.clone())))
                .max_by_key(|(_, unused, _)| *unused);
            if let Some((spec, _, server)) = lru
                && server.close_now()
            {
                servers.remove(&spec);
            }
        }
        if servers.len() >= MAX_SERVERS {
            return Err(SkillError::busy(format!(
                "cannot mount MCP server {}: this process is a client of {MAX_SERVERS} servers, each with a call under way; try again shortly",
                spec.describe()
            )));
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
            server.connection().await?;
            let tools = {
                let mut listed = server.listed.lock();
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
