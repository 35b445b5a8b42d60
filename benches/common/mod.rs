//! What the load benchmarks share: settings from the environment, a two-thread runtime, an
//! in-process server over a store with a no-op skill, latency percentiles, and a run on each
//! store (SQLite in a temporary folder, then Postgres when `DATABASE_URL` is set, in a schema
//! of its own that is dropped afterwards), and a process's resident memory.
#![allow(dead_code)]

pub mod conn;
pub mod report;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::sqlite::SqliteStore;
use skillgate::events::{Bus, BusConfig, EventStore, Limits, WithBus};
use skillgate::gateway::Gateway;
use skillgate::gateway::http::HttpConfig;
use skillgate::gateway::metrics::Metrics;
use skillgate::middleware::native;
use skillgate::server::{DoorSettings, Doors};

/// Where a started `skillgate serve` listens (`host:port`), read from its piped stderr; the
/// rest of its stderr is drained on a thread so the pipe never fills.
pub fn listen_addr(child: &mut std::process::Child) -> String {
    use std::io::{BufRead, BufReader};
    let stderr = child.stderr.take().expect("serve's stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("serve prints where it listens")
            .unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    addr
}

/// A number from the environment, or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The runtime the benchmarks drive their clients and in-process servers on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// p50 and p99 of samples in microseconds, in milliseconds.
pub fn percentiles(mut samples: Vec<u64>) -> (f64, f64) {
    samples.sort_unstable();
    let pct = |p: f64| {
        samples
            .get(((samples.len().max(1) - 1) as f64 * p) as usize)
            .map_or(f64::NAN, |v| *v as f64 / 1000.0)
    };
    (pct(0.5), pct(0.99))
}

/// The doors `settings` asks for, bound over `store`, with a skill `noop` that answers at once,
/// in `project` (a main skill there may declare routes).
pub async fn server(
    project: &std::path::Path,
    store: Arc<dyn EventStore>,
    settings: DoorSettings,
) -> Doors {
    let bus = Arc::new(Bus::new(
        store,
        BusConfig::with_visibility(Duration::from_secs(30)),
    ));
    let kernel = skillgate::builtins::builder(project)
        .bus(bus)
        .native(native(
            "name: noop\ndescription: Does nothing.\n",
            |_ctx, _args| async move { Ok(Some(json!("ok"))) },
        ))
        .build();
    let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
    Doors::bind(gateway, settings, project).await.expect("bind")
}

/// Serves `doors` until the process ends.
pub fn serve_forever(doors: Doors) {
    tokio::spawn(doors.run_until(std::future::pending(), Duration::from_secs(1)));
}

/// Runs `bench` on SQLite, then on Postgres when `DATABASE_URL` is set (schema `<prefix>_<pid>`,
/// dropped afterwards).
pub async fn on_each_store<F, Fut>(prefix: &str, bench: F)
where
    F: Fn(&'static str, Arc<dyn EventStore>) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(&dir.path().join("events.db"), Limits::default(), false)
        .await
        .expect("sqlite");
    bench("sqlite", Arc::new(sqlite)).await;
    if let Ok(url) = std::env::var("DATABASE_URL") {
        let schema = format!("{prefix}_{}", std::process::id());
        let pg = PostgresStore::connect(&url, Some(&schema), Limits::default())
            .await
            .expect("postgres");
        bench("postgres", Arc::new(pg)).await;
        if let Ok(pool) = sqlx::PgPool::connect(&url).await {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&pool)
                .await;
        }
    }
}

/// Settings for an in-process server on a free port with no rate limit.
pub fn config() -> DoorSettings {
    DoorSettings::http(HttpConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        rate_per_second: 0,
        ..HttpConfig::default()
    })
}

/// `conns` clients, each sending request after request for `secs` seconds: `send(client, n)`
/// sends request number `n` (numbers drawn from `next`, so every request is a new one) and
/// gives its latency in microseconds when it was accepted. Returns the accepted requests per
/// second and those latencies.
pub async fn saturate<C, F, Fut>(
    conns: u64,
    secs: u64,
    next: &Arc<AtomicU64>,
    client: impl Fn() -> C,
    send: F,
) -> (f64, Vec<u64>)
where
    C: Clone + Send + 'static,
    F: Fn(C, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Option<u64>> + Send,
{
    let end = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..conns {
        let (client, send, next) = (client(), send.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while Instant::now() < end {
                if let Some(us) = send(client.clone(), next.fetch_add(1, Ordering::Relaxed)).await {
                    mine.push(us);
                }
            }
            mine
        }));
    }
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.unwrap());
    }
    (
        latencies.len() as f64 / started.elapsed().as_secs_f64(),
        latencies,
    )
}

/// Resident memory of process `pid`, in KiB (0 where `/proc` cannot tell).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
