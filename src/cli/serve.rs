//! `skillgate serve`: the HTTP gateway over the project's skills until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use crate::cli::{FAILED, USAGE};
use crate::context::log::LogConfig;
use crate::events::WithBus;
use crate::events::{Bus, BusConfig, EventStore};
use crate::gateway::Gateway;
use crate::gateway::http::{HttpConfig, Overrides, Server};
use crate::gateway::metrics::Metrics;

/// Flags override `SKILLGATE_*` variables, which override the config file.
#[derive(Debug, Args)]
#[command(next_help_heading = "HTTP")]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "SKILLGATE_BIND")]
    pub bind: Option<SocketAddr>,
    /// Config file [default: skillgate.yaml in the project, if present].
    #[arg(long, env = "SKILLGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// API key hashes, comma-separated `name=sha256:<hex>` (see `skillgate keys new`).
    /// Without keys, authentication is off.
    #[arg(long, env = "SKILLGATE_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<String>,
    /// Paths reachable without a key, comma-separated globs
    /// [default: /healthz,/readyz,/openapi.yaml,/docs].
    #[arg(long, env = "SKILLGATE_PUBLIC")]
    pub public: Option<String>,
    /// Requests per second per API key (or client address); 0 turns the limit off [default: 50].
    #[arg(long, env = "SKILLGATE_RATE_LIMIT")]
    pub rate_limit: Option<u32>,
    /// Requests a caller may make at once above the rate [default: 100].
    #[arg(long, env = "SKILLGATE_RATE_BURST")]
    pub rate_burst: Option<u32>,
    /// Largest request body in bytes [default: 1048576].
    #[arg(long, env = "SKILLGATE_BODY_LIMIT")]
    pub body_limit: Option<usize>,
    /// Seconds an invocation may run before it is aborted [default: 30].
    #[arg(long, env = "SKILLGATE_TIMEOUT")]
    pub timeout: Option<f64>,
    /// Allowed CORS origins, comma-separated, or `*` [default: none].
    #[arg(long, env = "SKILLGATE_CORS_ORIGINS")]
    pub cors_origins: Option<String>,
    /// Seconds shutdown waits for in-flight requests and streams [default: 10].
    #[arg(long, env = "SKILLGATE_SHUTDOWN_GRACE")]
    pub grace: Option<f64>,
    /// Seconds a client may take to send a request's headers, and a connection with no
    /// request in flight (one that never sends a byte included) stays open [default: 10].
    #[arg(long, env = "SKILLGATE_HEADER_TIMEOUT")]
    pub header_timeout: Option<f64>,
    /// Seconds a client may take to send a whole request body after its headers; slower
    /// requests are answered 408 [default: 30].
    #[arg(long, env = "SKILLGATE_BODY_TIMEOUT")]
    pub body_timeout: Option<f64>,
    /// Connections served at once; more wait in the listen backlog until one closes
    /// [default: 1024, lowered to fit the process's file descriptor limit].
    #[arg(long, env = "SKILLGATE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Host names requests must be addressed to, comma-separated (`name` or `name:port`);
    /// others get 421. `/healthz` and `/readyz` answer any host [default: any host].
    #[arg(long, env = "SKILLGATE_ALLOWED_HOSTS")]
    pub allowed_hosts: Option<String>,
    /// Hidden skills that may still be invoked over HTTP, comma-separated name globs.
    #[arg(long, env = "SKILLGATE_EXPOSE_HIDDEN")]
    pub expose_hidden: Option<String>,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            bind: self.bind,
            config: self.config.clone(),
            api_keys: self.api_keys.clone(),
            public: self.public.clone(),
            rate_limit: self.rate_limit,
            rate_burst: self.rate_burst,
            body_limit: self.body_limit,
            timeout: self.timeout,
            cors_origins: self.cors_origins.clone(),
            grace: self.grace,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            max_connections: self.max_connections,
            allowed_hosts: self.allowed_hosts.clone(),
            expose_hidden: self.expose_hidden.clone(),
        }
    }
}

pub async fn serve(
    project: &Path,
    (store, store_label): (Arc<dyn EventStore>, String),
    (bus, max_depth): (BusConfig, u32),
    log: LogConfig,
    args: &ServeArgs,
) -> ExitCode {
    let config = match HttpConfig::resolve(project, &args.overrides()) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(USAGE);
        }
    };
    let store_kind = store.kind();
    let bus = Arc::new(Bus::new(store, bus));
    let kernel = crate::builtins::builder(project)
        .log_config(log)
        .bus(bus)
        .max_depth(max_depth)
        .build();
    let index = kernel.registry().current();
    for failure in index.failures() {
        eprintln!("warning: {}", failure.error);
    }
    let skills = index.tools().filter(|t| !t.hidden).count();
    let open = config.keys.is_empty();
    let loopback = config.bind.ip().is_loopback();
    let keys = config.keys.len();
    let grace = config.grace;
    let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
    let server = match Server::bind(gateway, config, project).await {
        Ok(server) => server,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(FAILED);
        }
    };
    let addr = server.local_addr();
    eprintln!(
        "skillgate: listening on http://{addr} ({skills} skills, {store_kind} event store {store_label}, {})",
        if open {
            "no API keys: every path is open".to_string()
        } else {
            format!("{keys} API key(s)")
        }
    );
    if open && !loopback {
        eprintln!(
            "warning: listening on {addr} without API keys; set SKILLGATE_API_KEYS before exposing the server"
        );
    }
    let report = server
        .run(async {
            let signal = crate::shutdown::signal().await;
            eprintln!(
                "skillgate: {}: stopping; in-flight requests get up to {:.1} s",
                signal.name(),
                grace.as_secs_f64()
            );
            signal.name().to_string()
        })
        .await;
    if report.drained {
        eprintln!("skillgate: stopped");
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "skillgate: the shutdown grace period of {:.1} s ran out; {} request(s) were cut off",
            grace.as_secs_f64(),
            report.abandoned
        );
        ExitCode::from(FAILED)
    }
}
