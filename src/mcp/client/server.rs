//! One MCP server the process is a client of: connected on first use, its tools listed on
//! connecting and again after it says they changed (`notifications/tools/list_changed`), and
//! connected again when the connection is found closed (a stdio server that exited, an HTTP
//! server that went away). A connection nothing used for a while is closed.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    JsonObject,
};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;

use crate::error::{ErrorKind, Result, SkillError};
use crate::mcp::client::mount::{Mount, ServerSpec};
use crate::skills::index::Layered;

/// How long starting a server and listing its tools may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Variables a stdio server gets from skillgate's own environment; anything else it needs is
/// given in its `env` (the service's environment holds database URLs and keys).
const PASSED_ENV: [&str; 10] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ",
];

/// A live connection.
pub struct Connection {
    service: RunningService<RoleClient, Listener>,
}

/// A server's tools, and those tools as mounted (built once per listing and mount, so the
/// indexes they are layered into are built once too; a reconnect that lists the same tools
/// keeps them).
#[derive(Default)]
pub struct Listed {
    pub tools: Vec<rmcp::model::Tool>,
    pub mounted: Vec<(Mount, Layered)>,
}

/// The client side of a connection: says who we are, and notes when the server's tool list
/// changed (read again before the next mount).
#[derive(Clone)]
struct Listener {
    info: ClientConfig,
    stale: Arc<AtomicBool>,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
    }
}

pub struct Server {
    pub spec: ServerSpec,
    current: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// When it was last mounted or called.
    last_used: parking_lot::Mutex<Instant>,
    /// Calls under way.
    in_flight: AtomicUsize,
    /// The last failure to connect, answered again for a moment instead of each waiting
    /// caller trying (and waiting for) the same dead server in turn.
    failed: parking_lot::Mutex<Option<(Instant, SkillError)>>,
    /// What it listed last.
    pub listed: parking_lot::Mutex<Listed>,
}

/// How long a failure to connect is answered without trying again.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Counts a call as under way while it lives.
struct InFlight<'a>(&'a Server);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        *self.0.last_used.lock() = Instant::now();
    }
}

impl Server {
    pub fn new(spec: ServerSpec) -> Server {
        Server {
            spec,
            current: tokio::sync::Mutex::new(None),
            last_used: parking_lot::Mutex::new(Instant::now()),
            in_flight: AtomicUsize::new(0),
            failed: parking_lot::Mutex::new(None),
            listed: parking_lot::Mutex::default(),
        }
    }

    /// Closes the connection (a stdio server's process ends) when nothing used it for `idle`
    /// and no call is under way; the next use connects again. True when it closed one.
    pub fn close_if_idle(&self, idle: Duration) -> bool {
        let Ok(mut current) = self.current.try_lock() else {
            return false; // connecting or listing right now
        };
        if current.is_none()
            || self.in_flight.load(Ordering::SeqCst) > 0
            || self.last_used.lock().elapsed() < idle
        {
            return false;
        }
        *current = None;
        tracing::info!(server = %self.spec.describe(), "closed an idle MCP server connection");
        true
    }

    /// How long nothing has used it, unless a call is under way or it is connecting (then it
    /// may not be let go).
    pub fn unused_for(&self) -> Option<Duration> {
        let current = self.current.try_lock().ok()?;
        drop(current);
        (self.in_flight.load(Ordering::SeqCst) == 0).then(|| self.last_used.lock().elapsed())
    }

    /// Whether a connection is open (or being made).
    pub fn is_connected(&self) -> bool {
        self.current.try_lock().map_or(true, |c| c.is_some())
    }

    /// Closes the connection now, whatever its idle time (the pool is full and it is the
    /// least recently used); false when a call is under way or it is connecting.
    pub fn close_now(&self) -> bool {
        let Ok(mut current) = self.current.try_lock() else {
            return false;
        };
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return false;
        }
        if current.take().is_some() {
            tracing::info!(server = %self.spec.describe(), "closed the least recently used MCP server connection to make room");
        }
        true
    }

    /// The live connection, made (again) when there is none or it was closed; its tools
    /// listed again when the server said they changed. A listing equal to the one before
    /// keeps the tools already mounted from it (and so the indexes built with them).
    pub async fn connection(&self) -> Result<Arc<Connection>> {
        let mut current = self.current.lock().await;
        *self.last_used.lock() = Instant::now();
        if let Some(conn) = current.as_ref()
            && !conn.service.is_transport_closed()
        {
            if conn.service.service().stale.swap(false, Ordering::SeqCst) {
                let listing = conn.service.peer().list_all_tools();
                match tokio::time::timeout(CONNECT_TIMEOUT, listing).await {
                    Ok(Ok(tools)) => self.listing(tools),
                    Ok(Err(err)) => {
                        let err = self.scrub(&err.to_string());
                        tracing::warn!(server = %self.spec.describe(), "cannot list an MCP server's tools again: {err}");
                    }
                    Err(_) => {
                        tracing::warn!(server = %self.spec.describe(), "an MCP server did not list its tools again in time");
                    }
                }
            }
            return Ok(conn.clone());
        }
        if current.take().is_some() {
            tracing::info!(server = %self.spec.describe(), "MCP server connection closed; connecting again");
        }
        if let Some((at, err)) = &*self.failed.lock()
            && at.elapsed() < RETRY_AFTER
        {
            return Err(err.clone());
        }
        let outcome = match tokio::time::timeout(CONNECT_TIMEOUT, connect(&self.spec)).await {
            Ok(outcome) => outcome.map_err(|e| self.scrubbed(e)),
            Err(_) => Err(self.unavailable(format!(
                "did not answer within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))),
        };
        let (conn, tools) = match outcome {
            Ok(connected) => connected,
            Err(err) => {
                *self.failed.lock() = Some((Instant::now(), err.clone()));
                return Err(err);
            }
        };
        *self.failed.lock() = None;
        self.listing(tools);
        let conn = Arc::new(conn);
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// Takes a new listing; the tools mounted from the last one stay when it is the same.
    fn listing(&self, tools: Vec<rmcp::model::Tool>) {
        let mut listed = self.listed.lock();
        if listed.tools != tools {
            tracing::info!(server = %self.spec.describe(), tools = tools.len(), "listed an MCP server's tools");
            *listed = Listed {
                tools,
                mounted: Vec::new(),
            };
        }
    }

    /// Forgets `conn` if it is still the current connection (the next use connects again).
    async fn forget(&self, conn: &Arc<Connection>) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *current = None;
        }
    }

    /// Calls `tool` (the server's name for it). A stdio request that could not be written is
    /// sent once more on a new connection; anything else that ends the connection during a
    /// call is an error, not retried (the server may have acted on it: over HTTP a failed
    /// POST can follow the whole run), and the next call connects again.
    pub async fn call(
        &self,
        tool: &str,
        args: JsonObject,
        timeout: Option<Duration>,
    ) -> Result<CallToolResult> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _in_flight = InFlight(self);
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        let mut retry = matches!(self.spec, ServerSpec::Stdio { .. });
        loop {
            let conn = self.connection().await?;
            let call = conn.service.peer().call_tool(params.clone());
            let outcome = match timeout {
                Some(limit) => match tokio::time::timeout(limit, call).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        return Err(self.unavailable(format!(
                            "`{tool}` did not answer within {:.1} s",
                            limit.as_secs_f64()
                        )));
                    }
                },
                None => call.await,
            };
            match outcome {
                Ok(result) => return Ok(result),
                Err(ServiceError::TransportSend(err)) if retry => {
                    let err = self.scrub(&err.to_string());
                    tracing::info!(server = %self.spec.describe(), "an MCP request was not sent ({err}); connecting again");
                    self.forget(&conn).await;
                    retry = false;
                }
                Err(ServiceError::McpError(err)) => {
                    let kind = if err.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                        ErrorKind::InvalidArgs
                    } else {
                        ErrorKind::Failed
                    };
                    let message = self.scrub(&err.message);
                    return Err(SkillError::new(
                        kind,
                        format!(
                            "MCP server {} refused `{tool}`: {message}",
                            self.spec.describe()
                        ),
                    ));
                }
                Err(ServiceError::TransportClosed | ServiceError::TransportSend(_)) => {
                    self.forget(&conn).await;
                    return Err(self.unavailable(format!(
                        "closed the connection during `{tool}` (the next call connects again)"
                    )));
                }
                Err(other) => {
                    let other = self.scrub(&other.to_string());
                    return Err(self.unavailable(format!("`{tool}`: {other}")));
                }
            }
        }
    }

    fn unavailable(&self, why: String) -> SkillError {
        SkillError::upstream(format!("MCP server {} {why}", self.spec.describe()))
    }

    /// `text` without the server's URL as written (an error of the HTTP client repeats it,
    /// query and credentials included): the described form stands in its place.
    fn scrub(&self, text: &str) -> String {
        let ServerSpec::Http { url, .. } = &self.spec else {
            return text.to_string();
        };
        let described = self.spec.describe();
        let shown = described.strip_prefix("HTTP ").unwrap_or(&described);
        let mut out = text.replace(url.as_str(), shown);
        if let Ok(parsed) = reqwest::Url::parse(url) {
            out = out.replace(parsed.as_str(), shown);
        }
        out
    }

    fn scrubbed(&self, err: SkillError) -> SkillError {
        let message = self.scrub(err.message());
        err.reworded(message)
    }
}

fn client() -> Listener {
    Listener {
        info: ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("skillgate", env!("CARGO_PKG_VERSION")),
        ),
        stale: Arc::default(),
    }
}

async fn connect(spec: &ServerSpec) -> Result<(Connection, Vec<rmcp::model::Tool>)> {
    let failed =
        |why: String| SkillError::upstream(format!("MCP server {}: {why}", spec.describe()));
    let service = match spec {
        ServerSpec::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).current_dir(cwd).env_clear();
            for key in PASSED_ENV {
                if let Some(value) = std::env::var_os(key) {
                    cmd.env(key, value);
                }
            }
            cmd.envs(env);
            let (transport, stderr) = TokioChildProcess::builder(stdio_command(cmd))
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| failed(format!("cannot start it in `{}`: {e}", cwd.display())))?;
            if let Some(stderr) = stderr {
                forward_stderr(command.clone(), stderr);
            }
            client()
                .serve(transport)
                .await
                .map_err(|e| failed(format!("no MCP handshake: {e}")))?
        }
        ServerSpec::Http { url, headers } => {
            crate::tls::install();
            let mut custom = std::collections::HashMap::new();
            for (name, value) in headers {
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| failed(format!("header `{name}`: {e}")))?;
                let value = reqwest::header::HeaderValue::from_str(value)
                    .map_err(|e| failed(format!("header `{name}`: {e}")))?;
                custom.insert(name, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            client()
                .serve(StreamableHttpClientTransport::from_config(config))
                .await
                .map_err(|e| failed(format!("no MCP handshake: {e}")))?
        }
    };
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| failed(format!("cannot list its tools: {e}")))?;
    tracing::info!(server = %spec.describe(), tools = tools.len(), "connected to an MCP server");
    Ok((Connection { service }, tools))
}

/// A stdio server's stderr, line by line, into the log.
fn forward_stderr(command: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(target: "skillgate::mcp", server = %command, "{line}");
        }
    });
}

/// How a stdio server is started so that it never outlives skillgate: in a process group of
/// its own, killed with everything it started when its connection is dropped (an idle close,
/// an eviction, shutdown), and, on Linux, killed by the kernel if skillgate itself dies.
#[allow(unsafe_code)]
fn stdio_command(mut cmd: tokio::process::Command) -> process_wrap::tokio::CommandWrap {
    #[cfg(target_os = "linux")]
    // SAFETY: the closure runs in the child between fork and exec and only makes one
    // async-signal-safe system call (prctl).
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
    wrapped
        .wrap(process_wrap::tokio::ProcessGroup::leader())
        .wrap(process_wrap::tokio::KillOnDrop);
    wrapped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_repeating_the_url_does_not_show_its_query_or_credentials() {
        let server = Server::new(ServerSpec::Http {
            url: "https://u:p@h/mcp?token=secret".into(),
            headers: Default::default(),
        });
        let text = server.scrub(
            "error sending request for url (https://u:p@h/mcp?token=secret): refused; again https://u:p@h/mcp?token=secret",
        );
        assert!(!text.contains("secret") && !text.contains("u:p"), "{text}");
        assert!(text.contains("url (https://h/mcp)"), "{text}");
    }
}
