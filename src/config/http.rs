//! Settings of the HTTP transport: [`HttpSettings`] as given (flags, `SKILLGATE_*` variables
//! and the `http:` section of the config file share it) and [`HttpConfig`], what the server
//! runs with once they are merged over the defaults and checked.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::config::errors::ConfigErrors;
use crate::config::values::{KeyList, List, Seconds, above_zero, at_least, share_fits};
use crate::config::websocket::WsConfig;
use crate::gateway::keys::{ApiKey, KeyRing};

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
    /// How long a server told to stop keeps taking work with `/readyz` failing, before its
    /// grace starts: the time a balancer needs to see it go.
    pub drain: Duration,
    /// How long a client may take to send a request's headers, counted from when the
    /// connection opened or its last response ended (so also how long a connection without a
    /// request in flight stays open); slower connections are closed.
    pub header_timeout: Duration,
    /// How long a client may take to send a whole request body, counted from its headers;
    /// slower requests are answered 408.
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Connections one client address may hold at once; more are closed as they come.
    pub max_connections_per_peer: usize,
    /// Runs at once, every door together; more are refused as busy.
    pub max_runs: usize,
    /// Bytes of args of the runs going at once, every door together; more are refused as busy.
    pub max_args_in_flight: usize,
    /// Bytes of request bodies over 16 KiB being received, every connection together; a body
    /// that would pass it is read only once others have arrived.
    pub total_body_bytes: usize,
    /// What of `total_body_bytes` the connections of one client address may hold together.
    pub peer_body_bytes: usize,
    /// Proxies whose `X-Forwarded-For` / `Forwarded` headers name the client (addresses or
    /// networks).
    pub trusted_proxies: Vec<String>,
    /// `Host` names (optionally `name:port`) requests must be addressed to; empty allows any.
    pub allowed_hosts: Vec<String>,
    /// Hidden skills that may still be invoked over HTTP (name patterns).
    pub expose_hidden: Vec<String>,
    /// Emit `gateway-message` for every HTTP invocation too.
    pub announce: bool,
    /// `public/` to serve statically, if it exists.
    pub public_dir: Option<PathBuf>,
    /// The WebSocket endpoint `/ws` on this listener.
    pub websocket: WsConfig,
}

pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
/// Enough for a busy instance, and below the 1024 descriptors many systems allow a process by
/// default once the store, skills and logs have theirs (see `descriptors`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Connections one client address may hold unless configured otherwise.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 64;
pub const DEFAULT_PUBLIC: [&str; 5] = [
    "/healthz",
    "/readyz",
    "/openapi.yaml",
    "/asyncapi.yaml",
    "/docs",
];

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
            drain: Duration::ZERO,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            max_runs: crate::gateway::dispatch::DEFAULT_MAX_RUNS,
            max_args_in_flight: crate::gateway::dispatch::DEFAULT_MAX_ARG_BYTES,
            total_body_bytes: 32 * 1024 * 1024,
            peer_body_bytes: 8 * 1024 * 1024,
            trusted_proxies: Vec::new(),
            allowed_hosts: Vec::new(),
            expose_hidden: Vec::new(),
            announce: false,
            public_dir: None,
            websocket: WsConfig::default(),
        }
    }
}

/// The HTTP settings as given: one struct for the `serve` flags, their `SKILLGATE_*`
/// variables and the `http:` section of `skillgate.yaml` (same names: `--rate-limit` is
/// `rate-limit:`). Every field is optional: unset means "the next source decides" (flags and
/// variables, then the file, then the defaults of [`HttpConfig`]).
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[command(next_help_heading = "HTTP")]
pub struct HttpSettings {
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "SKILLGATE_BIND")]
    pub bind: Option<SocketAddr>,
    /// API key hashes, comma-separated `name=sha256:<hex>` (see `skillgate keys new`); in the
    /// file also a list of `{name, hash, skills}`. Without keys, authentication is off.
    #[arg(long, env = "SKILLGATE_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<KeyList>,
    /// Paths reachable without a key, comma-separated globs
    /// [default: /healthz,/readyz,/openapi.yaml,/asyncapi.yaml,/docs].
    #[arg(long, env = "SKILLGATE_PUBLIC")]
    pub public: Option<List>,
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
    pub timeout: Option<Seconds>,
    /// Allowed CORS origins, comma-separated, or `*` [default: none].
    #[arg(long, env = "SKILLGATE_CORS_ORIGINS")]
    pub cors_origins: Option<List>,
    /// Seconds shutdown waits for in-flight requests and streams [default: 10].
    #[arg(long, env = "SKILLGATE_SHUTDOWN_GRACE")]
    pub grace: Option<Seconds>,
    /// Seconds a server told to stop keeps taking work while `/readyz` fails, before the grace
    /// starts, so a balancer takes it out first [default: 0].
    #[arg(long, env = "SKILLGATE_DRAIN")]
    pub drain: Option<Seconds>,
    /// Seconds a client may take to send a request's headers, and a connection with no
    /// request in flight (one that never sends a byte included) stays open [default: 10].
    #[arg(long, env = "SKILLGATE_HEADER_TIMEOUT")]
    pub header_timeout: Option<Seconds>,
    /// Seconds a client may take to send a whole request body after its headers; slower
    /// requests are answered 408. A body over 16 KiB that holds room in the receive budget
    /// must also keep arriving at no less than what it holds (its length, or the body limit
    /// when its length is unknown) over this, after a sixth of it [default: 30].
    #[arg(long, env = "SKILLGATE_BODY_TIMEOUT")]
    pub body_timeout: Option<Seconds>,
    /// Connections served at once; more wait in the listen backlog until one closes
    /// [default: 1024, lowered to fit the process's file descriptor limit].
    #[arg(long, env = "SKILLGATE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Connections one client address may hold at once; more are closed as they come, so one
    /// client cannot take every slot [default: 64].
    #[arg(long, env = "SKILLGATE_MAX_CONNECTIONS_PER_PEER")]
    pub max_connections_per_peer: Option<usize>,
    /// Invocations running at once, every door together; more are refused as busy (503 with
    /// `Retry-After` over HTTP) [default: 1024].
    #[arg(long, env = "SKILLGATE_MAX_RUNS")]
    pub max_runs: Option<usize>,
    /// Bytes of args (their JSON size) of the invocations running at once, every door
    /// together; one that does not fit is refused as busy [default: 8388608].
    #[arg(long, env = "SKILLGATE_MAX_ARGS_IN_FLIGHT")]
    pub max_args_in_flight: Option<usize>,
    /// Bytes of request bodies over 16 KiB being received, every connection together; over
    /// HTTP/1 a body that would pass it is read once others have arrived (its client's bytes
    /// wait in the network), over HTTP/2 it is refused as busy (503); at least `body-limit`
    /// [default: 33554432, or `body-limit` if larger].
    #[arg(long, env = "SKILLGATE_TOTAL_BODY_BYTES")]
    pub total_body_bytes: Option<usize>,
    /// What of `total-body-bytes` the connections of one client address may hold together
    /// (behind a trusted proxy: the forwarded address); at least `body-limit` [default: 8388608,
    /// or `body-limit` if larger].
    #[arg(long, env = "SKILLGATE_PEER_BODY_BYTES")]
    pub peer_body_bytes: Option<usize>,
    /// Proxies in front whose `X-Forwarded-For` / `Forwarded` name the client, comma-separated
    /// addresses or networks (`10.0.0.0/8`); from anyone else those headers are ignored
    /// [default: none].
    #[arg(long, env = "SKILLGATE_TRUSTED_PROXIES")]
    pub trusted_proxies: Option<List>,
    /// Host names requests must be addressed to, comma-separated (`name` or `name:port`);
    /// others get 421. `/healthz` and `/readyz` answer any host [default: any host].
    #[arg(long, env = "SKILLGATE_ALLOWED_HOSTS")]
    pub allowed_hosts: Option<List>,
    /// Hidden skills that may still be invoked over HTTP, comma-separated name globs.
    #[arg(long, env = "SKILLGATE_EXPOSE_HIDDEN")]
    pub expose_hidden: Option<List>,
    /// Emit `gateway-message` for every HTTP invocation too (file only).
    #[arg(skip)]
    pub gateway_message: Option<bool>,
    /// Serve without API keys on an address other than loopback: anyone who reaches it is the
    /// local caller. Refused without this; set `SKILLGATE_API_KEYS` instead.
    #[arg(long, env = "SKILLGATE_INSECURE_NO_AUTH", num_args = 0..=1, default_missing_value = "true")]
    pub insecure_no_auth: Option<bool>,
}

/// `a.or(b)` field by field: `a`'s value where it has one, else `b`'s.
macro_rules! or_fields {
    ($a:ident, $b:ident, $ty:ident { $($field:ident),* $(,)? }) => {
        $ty { $($field: $a.$field.or($b.$field)),* }
    };
}

impl HttpSettings {
    /// True when `key` names an HTTP setting (to point a misplaced top-level key to `http:`).
    pub fn is_setting(key: &str) -> bool {
        const KEYS: [&str; 23] = [
            "max-runs",
            "max-args-in-flight",
            "total-body-bytes",
            "peer-body-bytes",
            "max-connections-per-peer",
            "trusted-proxies",
            "insecure-no-auth",
            "bind",
            "api-keys",
            "public",
            "rate-limit",
            "rate-burst",
            "body-limit",
            "timeout",
            "cors-origins",
            "grace",
            "drain",
            "header-timeout",
            "body-timeout",
            "max-connections",
            "allowed-hosts",
            "expose-hidden",
            "gateway-message",
        ];
        KEYS.contains(&key) || matches!(key, "auth" | "cors" | "shutdown-grace")
    }

    /// These settings, with what `file` sets where these leave a gap.
    pub fn or(self, file: HttpSettings) -> HttpSettings {
        or_fields!(
            self,
            file,
            HttpSettings {
                bind,
                api_keys,
                public,
                rate_limit,
                rate_burst,
                body_limit,
                timeout,
                cors_origins,
                grace,
                drain,
                header_timeout,
                body_timeout,
                max_connections,
                max_connections_per_peer,
                max_runs,
                max_args_in_flight,
                total_body_bytes,
                peer_body_bytes,
                trusted_proxies,
                allowed_hosts,
                expose_hidden,
                gateway_message,
                insecure_no_auth,
            }
        )
    }
}

impl HttpConfig {
    /// The settings `serve` runs with: `settings` (flags over file, already merged) over the
    /// defaults, checked. Every mistake is reported, each under its setting's path (`http.x`);
    /// `origin` says where a path was written, when known.
    pub fn resolve(
        project: &Path,
        settings: HttpSettings,
        origin: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HttpConfig, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        let mut config = HttpConfig::default();
        if let Some(bind) = settings.bind {
            config.bind = bind;
        }
        let mut keys = Vec::new();
        for (i, key) in settings
            .api_keys
            .unwrap_or_default()
            .0
            .into_iter()
            .enumerate()
        {
            match ApiKey::new(&key.name, &key.hash, key.skills)
                .and_then(|k| k.with_grants(key.topics, key.admin))
            {
                Ok(key) => keys.push(key),
                Err(e) => errors.at(format!("http.api-keys[{i}]"), e.to_string()),
            }
        }
        match KeyRing::new(keys) {
            Ok(ring) => config.keys = ring,
            Err(e) => errors.at("http.api-keys", e.to_string()),
        }
        if let Some(List(public)) = settings.public {
            config.public = public;
        }
        config.rate_per_second = settings.rate_limit.unwrap_or(config.rate_per_second);
        config.rate_burst = settings.rate_burst.unwrap_or(config.rate_burst).max(1);
        config.body_limit = settings.body_limit.unwrap_or(config.body_limit);
        // Unless given, the body budget and its share grow to hold one body of the limit.
        config.total_body_bytes = config.total_body_bytes.max(config.body_limit);
        config.peer_body_bytes = config.peer_body_bytes.max(config.body_limit);
        if let Some(Seconds(t)) = settings.timeout {
            config.timeout = t;
        }
        if let Some(Seconds(t)) = settings.grace {
            config.grace = t;
        }
        if let Some(Seconds(t)) = settings.drain {
            config.drain = t;
        }
        above_zero(
            &mut errors,
            "http.header-timeout",
            settings.header_timeout,
            &mut config.header_timeout,
        );
        above_zero(
            &mut errors,
            "http.body-timeout",
            settings.body_timeout,
            &mut config.body_timeout,
        );
        for (path, value, slot) in [
            (
                "http.max-connections",
                (settings.max_connections, 1),
                &mut config.max_connections,
            ),
            (
                "http.max-connections-per-peer",
                (settings.max_connections_per_peer, 1),
                &mut config.max_connections_per_peer,
            ),
            (
                "http.max-runs",
                (settings.max_runs, 1),
                &mut config.max_runs,
            ),
            (
                "http.max-args-in-flight",
                (settings.max_args_in_flight, 1024 * 1024),
                &mut config.max_args_in_flight,
            ),
            (
                "http.total-body-bytes",
                (settings.total_body_bytes, 1),
                &mut config.total_body_bytes,
            ),
            (
                "http.peer-body-bytes",
                (settings.peer_body_bytes, 1),
                &mut config.peer_body_bytes,
            ),
        ] {
            at_least(&mut errors, path, value, slot);
        }
        share_fits(
            &mut errors,
            ("http.total-body-bytes", "http.peer-body-bytes"),
            (config.total_body_bytes, config.peer_body_bytes),
            ("body-limit", config.body_limit),
        );
        if let Some(List(proxies)) = settings.trusted_proxies {
            if let Err(err) = crate::gateway::peers::TrustedProxies::new(&proxies) {
                errors.at("http.trusted-proxies", err);
            }
            config.trusted_proxies = proxies;
        }
        if let Some(List(hosts)) = settings.allowed_hosts {
            config.allowed_hosts = hosts;
        }
        if let Some(List(origins)) = settings.cors_origins {
            config.cors_origins = origins;
        }
        if let Some(List(hidden)) = settings.expose_hidden {
            config.expose_hidden = hidden;
        }
        config.announce = settings.gateway_message.unwrap_or(false);
        if config.keys.is_empty()
            && !config.bind.ip().is_loopback()
            && !settings.insecure_no_auth.unwrap_or(false)
        {
            errors.at(
                "http.bind",
                format!(
                    "{} is not a loopback address and no API keys are set: anyone who reaches it would be the local caller. Set SKILLGATE_API_KEYS (`skillgate keys new`), bind 127.0.0.1, or pass --insecure-no-auth",
                    config.bind
                ),
            );
        }
        let public_dir = project.join("public");
        config.public_dir = public_dir.is_dir().then_some(public_dir);
        errors.located(origin).or_ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(settings: HttpSettings) -> Result<HttpConfig, ConfigErrors> {
        HttpConfig::resolve(Path::new("."), settings, &|_| None)
    }

    #[test]
    fn a_body_limit_over_the_body_budget_raises_it_unless_it_was_given() {
        let large = 16 * 1024 * 1024;
        let config = resolve(HttpSettings {
            body_limit: Some(large),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(config.peer_body_bytes, large);
        assert_eq!(config.total_body_bytes, 32 * 1024 * 1024);
        let given = resolve(HttpSettings {
            body_limit: Some(large),
            peer_body_bytes: Some(8 * 1024 * 1024),
            total_body_bytes: Some(4 * 1024 * 1024),
            ..Default::default()
        });
        let err = format!("{:?}", given.expect_err("refused"));
        assert!(err.contains("http.peer-body-bytes"), "{err}");
        assert!(err.contains("http.total-body-bytes"), "{err}");
    }
}
