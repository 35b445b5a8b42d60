//! Settings of the HTTP transport, and how they are read: command-line flags and `SKILLGATE_*`
//! variables first, then the config file (`skillgate.yaml` in the project, or `--config`),
//! then defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::gateway::http::auth::{ApiKey, KeyRing};

/// The resolved settings `skillgate serve` runs with.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub bind: SocketAddr,
    pub keys: KeyRing,
    /// Path patterns (globs) reachable without a key. `/healthz` is always public.
    pub public: Vec<String>,
    /// Requests per second per key (or per client address without a key); 0 turns it off.
    pub rate_per_second: u32,
    pub rate_burst: u32,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Longest invocation (JSON or streamed), after which it is aborted.
    pub timeout: Duration,
    /// Allowed CORS origins; empty sends no CORS headers, `*` allows any.
    pub cors_origins: Vec<String>,
    /// How long shutdown waits for in-flight requests and streams.
    pub grace: Duration,
    /// How long a client may take to send a request's headers, counted from when the
    /// connection opened or its last response ended (so also how long a connection without a
    /// request in flight stays open); slower connections are closed.
    pub header_timeout: Duration,
    /// How long a client may take to send a whole request body, counted from its headers;
    /// slower requests are answered 408.
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// `Host` names (optionally `name:port`) requests must be addressed to; empty allows any.
    pub allowed_hosts: Vec<String>,
    /// Hidden skills that may still be invoked over HTTP (name patterns).
    pub expose_hidden: Vec<String>,
    /// Emit `gateway-message` for every HTTP invocation too.
    pub announce: bool,
    /// `public/` to serve statically, if it exists.
    pub public_dir: Option<PathBuf>,
}

pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
/// Enough for a busy instance, and below the 1024 descriptors many systems allow a process by
/// default once the store, skills and logs have theirs (see `descriptors`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
pub const DEFAULT_PUBLIC: [&str; 4] = ["/healthz", "/readyz", "/openapi.yaml", "/docs"];

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            bind: DEFAULT_BIND.parse().expect("valid default address"),
            keys: KeyRing::default(),
            public: DEFAULT_PUBLIC.iter().map(|s| s.to_string()).collect(),
            rate_per_second: 50,
            rate_burst: 100,
            body_limit: 1024 * 1024,
            timeout: Duration::from_secs(30),
            cors_origins: Vec::new(),
            grace: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            allowed_hosts: Vec::new(),
            expose_hidden: Vec::new(),
            announce: false,
            public_dir: None,
        }
    }
}

/// What the command line and the environment gave (each `None` when not given).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub bind: Option<SocketAddr>,
    pub config: Option<PathBuf>,
    pub api_keys: Option<String>,
    pub public: Option<String>,
    pub rate_limit: Option<u32>,
    pub rate_burst: Option<u32>,
    pub body_limit: Option<usize>,
    pub timeout: Option<f64>,
    pub cors_origins: Option<String>,
    pub grace: Option<f64>,
    pub header_timeout: Option<f64>,
    pub body_timeout: Option<f64>,
    pub max_connections: Option<usize>,
    pub allowed_hosts: Option<String>,
    pub expose_hidden: Option<String>,
}

/// The config file, as written (kebab-case keys; unknown keys are an error).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    bind: Option<String>,
    auth: Option<FileAuth>,
    rate_limit: Option<FileRate>,
    body_limit: Option<usize>,
    timeout: Option<f64>,
    cors: Option<FileCors>,
    shutdown_grace: Option<f64>,
    header_timeout: Option<f64>,
    body_timeout: Option<f64>,
    max_connections: Option<usize>,
    allowed_hosts: Option<Vec<String>>,
    expose_hidden: Option<Vec<String>>,
    gateway_message: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileAuth {
    keys: Option<Vec<FileKey>>,
    public: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKey {
    name: String,
    hash: String,
    /// Skill name patterns the key may invoke (default: all).
    skills: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileRate {
    per_second: Option<u32>,
    burst: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCors {
    origins: Option<Vec<String>>,
}

/// The config file used when `--config` is not given, if it exists.
pub const DEFAULT_FILE: &str = "skillgate.yaml";

impl HttpConfig {
    /// Reads flags and environment (`cli`), the config file, and defaults, in that order.
    pub fn resolve(project: &Path, cli: &Overrides) -> Result<HttpConfig, String> {
        let file_path = match &cli.config {
            Some(path) => Some(path.clone()),
            None => Some(project.join(DEFAULT_FILE)).filter(|p| p.is_file()),
        };
        let file = match &file_path {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let origin = file_path
            .as_ref()
            .map_or_else(String::new, |p| p.display().to_string());
        let mut config = HttpConfig::default();
        if let Some(bind) = cli.bind {
            config.bind = bind;
        } else if let Some(bind) = &file.bind {
            config.bind = bind
                .parse()
                .map_err(|e| format!("{origin}: `bind`: `{bind}` is not an address: {e}"))?;
        }
        let auth = file.auth.unwrap_or_default();
        let mut keys = Vec::new();
        for (i, key) in auth.keys.unwrap_or_default().into_iter().enumerate() {
            let parsed = ApiKey::new(&key.name, &key.hash, key.skills.unwrap_or_default())
                .map_err(|e| format!("{origin}: `auth.keys[{i}]`: {e}"))?;
            keys.push(parsed);
        }
        if let Some(list) = &cli.api_keys {
            for (i, item) in split_list(list).into_iter().enumerate() {
                let (name, hash) = item.split_once('=').unwrap_or(("", item.as_str()));
                let name = if name.is_empty() {
                    format!("key-{}", i + 1)
                } else {
                    name.to_string()
                };
                keys.push(ApiKey::new(&name, hash, Vec::new()).map_err(|e| {
                    format!("SKILLGATE_API_KEYS / --api-keys, item {}: {e}", i + 1)
                })?);
            }
        }
        config.keys = KeyRing::new(keys).map_err(|e| e.to_string())?;
        if let Some(public) = &cli.public {
            config.public = split_list(public);
        } else if let Some(public) = auth.public {
            config.public = public;
        }
        let rate = file.rate_limit.unwrap_or_default();
        config.rate_per_second = cli
            .rate_limit
            .or(rate.per_second)
            .unwrap_or(config.rate_per_second);
        config.rate_burst = cli
            .rate_burst
            .or(rate.burst)
            .unwrap_or(config.rate_burst)
            .max(1);
        config.body_limit = cli
            .body_limit
            .or(file.body_limit)
            .unwrap_or(config.body_limit);
        if let Some(secs) = cli.timeout.or(file.timeout) {
            config.timeout = seconds("timeout", secs)?;
        }
        if let Some(secs) = cli.grace.or(file.shutdown_grace) {
            config.grace = seconds("shutdown-grace", secs)?;
        }
        if let Some(secs) = cli.header_timeout.or(file.header_timeout) {
            config.header_timeout = seconds("header-timeout", secs)?;
            if config.header_timeout.is_zero() {
                return Err("`header-timeout` must be above 0 seconds".into());
            }
        }
        if let Some(secs) = cli.body_timeout.or(file.body_timeout) {
            config.body_timeout = seconds("body-timeout", secs)?;
            if config.body_timeout.is_zero() {
                return Err("`body-timeout` must be above 0 seconds".into());
            }
        }
        if let Some(max) = cli.max_connections.or(file.max_connections) {
            if max == 0 {
                return Err("`max-connections` must be at least 1".into());
            }
            config.max_connections = max;
        }
        if let Some(hosts) = &cli.allowed_hosts {
            config.allowed_hosts = split_list(hosts);
        } else if let Some(hosts) = file.allowed_hosts {
            config.allowed_hosts = hosts;
        }
        if let Some(origins) = &cli.cors_origins {
            config.cors_origins = split_list(origins);
        } else if let Some(cors) = file.cors {
            config.cors_origins = cors.origins.unwrap_or_default();
        }
        if let Some(hidden) = &cli.expose_hidden {
            config.expose_hidden = split_list(hidden);
        } else if let Some(hidden) = file.expose_hidden {
            config.expose_hidden = hidden;
        }
        config.announce = file.gateway_message.unwrap_or(false);
        let public_dir = project.join("public");
        config.public_dir = public_dir.is_dir().then_some(public_dir);
        Ok(config)
    }
}

fn read_file(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    if text.trim().is_empty() {
        return Ok(FileConfig::default());
    }
    serde_saphyr::from_str::<FileConfig>(&text).map_err(|err| {
        let message = err.to_string();
        let message = message.lines().next().unwrap_or_default().to_string();
        match err.location() {
            Some(loc) => format!(
                "{}:{}:{}: {message}",
                path.display(),
                loc.line(),
                loc.column()
            ),
            None => format!("{}: {message}", path.display()),
        }
    })
}

fn seconds(what: &str, secs: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("`{what}` must be a number of seconds, got {secs}"))
}

/// `a, b ,c` -> [a, b, c], empty items dropped.
fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}
