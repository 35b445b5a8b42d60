//! `skillgate mcp`: the project's public skills as an MCP server on stdin/stdout, for desktop
//! clients that start it as a child process. Logs go to stderr; stdout carries only the
//! protocol. The local user is trusted as `run` trusts them: every public skill (and the
//! `expose-hidden` ones of the config file) can be called. Edited skills are reloaded as under
//! `serve`, and the client is sent `notifications/tools/list_changed`.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use rmcp::ServiceExt;

use crate::cli::{FAILED, USAGE};
use crate::config::ConfigFile;
use crate::config::values::List;
use crate::context::log::LogConfig;
use crate::events::{Bus, BusConfig, EventStore};
use crate::gateway::Gateway;
use crate::gateway::metrics::Metrics;
use crate::gateway::policy::Policy;
use crate::mcp::SkillServer;

pub async fn mcp(
    project: &Path,
    file: &ConfigFile,
    store: Arc<dyn EventStore>,
    (bus, limits): (BusConfig, super::RunLimits),
    log: LogConfig,
) -> ExitCode {
    let hidden = file
        .http
        .expose_hidden
        .clone()
        .map(|List(list)| list)
        .unwrap_or_default();
    let policy = match Policy::new(&hidden) {
        Ok(policy) => policy,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(USAGE);
        }
    };
    let kernel =
        super::kernel_builder(project, log, Arc::new(Bus::new(store, bus)), limits).build();
    // Edits to the skills are picked up as under `serve`, and the client told the list changed.
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop_reloading = stop.clone().drop_guard();
    crate::reload::spawn(
        kernel.clone(),
        (project.to_path_buf(), file.path.clone()),
        (true, crate::reload::Applies::Skills),
        None,
        stop,
    );
    let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
    let server = SkillServer::new(gateway, policy, None);
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        Err(err) => {
            eprintln!("error: the MCP client did not start a session: {err}");
            return ExitCode::from(FAILED);
        }
    };
    match running.waiting().await {
        Ok(_) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: the MCP server stopped: {err}");
            ExitCode::from(FAILED)
        }
    }
}
