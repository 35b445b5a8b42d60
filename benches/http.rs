//! HTTP load: `POST /invoke/noop` through the whole gateway (keys, CORS and rate limit off, so
//! their layers are not installed; request id, metrics, dispatch, the kernel's full default
//! pipeline) against a bare axum handler that returns the same JSON, measured in the same run by
//! the load generator below.
//!
//! The generator speaks HTTP/1.1 keep-alive over raw sockets (one request in flight per
//! connection) so that it costs little next to the servers it measures. Two phases:
//! 1. saturation: `CONNS` connections send back to back for `SECS` seconds: requests/s;
//! 2. half load: a fixed rate of half the gateway's saturation figure, spread over the
//!    connections, each request timed from when it was due (no coordinated omission): p50/p99.
//!
//! The gateway runs as `serve` does by default: on the SQLite store, with the runs record on
//! (`SKILLGATE_BENCH_STORE=memory` and `SKILLGATE_BENCH_RUNS=0` change that).
//!
//! Run: `cargo bench --bench http` (release). `SKILLGATE_BENCH_SECS` and
//! `SKILLGATE_BENCH_CONNS` change the duration (default 5 s) and the connections (default 32);
//! `SKILLGATE_BENCH_PROFILE=1` loads only the gateway at saturation, for a profiler; with
//! `SKILLGATE_BENCH_RUNS=alternate` as well, it turns the runs record on and off every second
//! and prints what a request cost the server's threads in each state (`benches/runs-cost`).
//!
//! `SKILLGATE_BENCH_COUNT=n` with `SKILLGATE_BENCH_SERVER=gateway` or `bare`: no timing; `n`
//! requests to that server alone (over `CONNS` connections, default 1 here: one request at a
//! time, so that how the threads interleave does not change what they execute) from the main
//! thread, on a server runtime of one worker, for a counting profiler
//! (`benches/http-instructions`: the server threads' instructions a request, gateway and bare,
//! under callgrind).

mod common;
#[path = "http/record_cost.rs"]
mod record_cost;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};
use skillgate::gateway::Gateway;
use skillgate::gateway::http::HttpConfig;
use skillgate::gateway::metrics::Metrics;
use skillgate::middleware::native;

use common::conn::Conn;
use common::env_or;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Starts both servers on a runtime of their own; returns (gateway, bare) addresses and the
/// gateway's bus (for its runs record's counts).
fn start_servers(
    project: &std::path::Path,
) -> (SocketAddr, SocketAddr, Arc<skillgate::events::Bus>) {
    let project = project.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // One worker when counting: with two, how often a worker wakes to look for work it
        // could steal changes from run to run, and the counts with it.
        let workers = if std::env::var("SKILLGATE_BENCH_COUNT").is_ok() {
            1
        } else {
            2
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("server runtime");
        runtime.block_on(async move {
            let mut builder = skillgate::builtins::builder(&project);
            // The store `serve` uses by default, SQLite in the project, unless
            // `SKILLGATE_BENCH_STORE=memory`; the runs record on, as `serve` has it, unless
            // `SKILLGATE_BENCH_RUNS=0`.
            if std::env::var("SKILLGATE_BENCH_STORE").as_deref() != Ok("memory") {
                let store = skillgate::events::sqlite::SqliteStore::open(
                    &project.join("events.db"),
                    skillgate::events::Limits::default(),
                    false,
                )
                .await
                .expect("open the SQLite store");
                let bus = skillgate::events::Bus::new(Arc::new(store), Default::default());
                builder = skillgate::events::WithBus::bus(builder, Arc::new(bus));
            }
            let kernel = builder
                .native(native(
                    "name: noop\ndescription: Does nothing.\n",
                    |_ctx, _args| async move { Ok(Some(json!({ "ok": true }))) },
                ))
                .build();
            let config = HttpConfig {
                bind: "127.0.0.1:0".parse().unwrap(),
                rate_per_second: 0,
                ..HttpConfig::default()
            };
            if std::env::var("SKILLGATE_BENCH_RUNS").as_deref() == Ok("0") {
                skillgate::events::KernelBus::bus(&kernel)
                    .runs()
                    .configure(None);
            }
            let bus = skillgate::events::KernelBus::bus(&kernel).clone();
            let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
            let server = skillgate::server::Doors::bind(
                gateway,
                skillgate::server::DoorSettings::http(config),
                &project,
            )
            .await
            .expect("bind");
            let gateway_addr = server.http_addr().unwrap();
            tokio::spawn(server.run_until(std::future::pending(), Duration::from_secs(1)));
            let bare = Router::new().route(
                "/invoke/noop",
                post(|| async { axum::Json(json!({ "result": { "ok": true } })) }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let bare_addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, bare).await });
            tx.send((gateway_addr, bare_addr, bus)).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().expect("servers started")
}

/// The request both servers answer.
const NOOP: [(&str, &str); 1] = [("/invoke/noop", "{}")];

async fn open(addr: SocketAddr) -> Conn {
    Conn::open(addr, &NOOP).await.expect("connect")
}

/// Requests answered so far by [`saturate`].
static ANSWERED: AtomicU64 = AtomicU64::new(0);

/// Back-to-back requests on `conns` connections for `secs`: requests per second.
async fn saturate(addr: SocketAddr, conns: usize, secs: u64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            tokio::spawn(async move {
                let mut conn = open(addr).await;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    conn.round_trip().await.expect("200");
                    ANSWERED.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let started = Instant::now();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// `n` requests (spread over `conns` connections, back to back on each), answered.
async fn counted(addr: SocketAddr, conns: usize, n: u64) {
    let tasks: Vec<_> = (0..conns as u64)
        .map(|i| {
            // The first `n % conns` connections send one more.
            let share = n / conns as u64 + u64::from(i < n % conns as u64);
            tokio::spawn(async move {
                let mut conn = open(addr).await;
                for _ in 0..share {
                    conn.round_trip().await.expect("200");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// A fixed total `rate` over `conns` connections for `secs`; latency from each request's due
/// time, in microseconds, sorted.
async fn paced(addr: SocketAddr, conns: usize, rate: f64, secs: u64) -> Vec<u64> {
    let per_conn = Duration::from_secs_f64(conns as f64 / rate);
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..conns)
        .map(|i| {
            tokio::spawn(async move {
                let mut conn = open(addr).await;
                let mut latencies = Vec::new();
                // Stagger the connections across one interval.
                let mut due = start + per_conn.mul_f64(i as f64 / conns as f64);
                while due < end {
                    tokio::time::sleep_until(due.into()).await;
                    conn.round_trip().await.expect("200");
                    latencies.push(due.elapsed().as_micros() as u64);
                    due += per_conn;
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    all
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument of another bench skips this one.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"http".contains(&a))
    {
        return;
    }
    // The subscriber `serve` installs, with its filter: without one, every span the gateway and
    // the kernel make would take tracing's fallback to the `log` crate, which `serve` never does.
    let _telemetry = skillgate::telemetry::init(
        skillgate::telemetry::LogFormat::Text,
        skillgate::telemetry::SERVE_FILTER,
    );
    let secs = env_or("SKILLGATE_BENCH_SECS", 5);
    let conns = env_or("SKILLGATE_BENCH_CONNS", 32) as usize;
    let dir = tempfile::tempdir().expect("temp dir");
    let (gateway, bare, bus) = start_servers(dir.path());
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    client.block_on(async {
        // Both answer the same JSON.
        let a: Value =
            serde_json::from_slice(&open(gateway).await.round_trip().await.unwrap()).unwrap();
        let b: Value =
            serde_json::from_slice(&open(bare).await.round_trip().await.unwrap()).unwrap();
        assert_eq!(a, b, "the two servers must answer the same body");
        if let Ok(n) = std::env::var("SKILLGATE_BENCH_COUNT") {
            let n: u64 = n.parse().expect("SKILLGATE_BENCH_COUNT is a number");
            let server = match std::env::var("SKILLGATE_BENCH_SERVER").as_deref() {
                Ok("gateway") => gateway,
                Ok("bare") => bare,
                _ => panic!("SKILLGATE_BENCH_SERVER is `gateway` or `bare`"),
            };
            counted(server, env_or("SKILLGATE_BENCH_CONNS", 1) as usize, n).await;
            let runs = bus.runs();
            runs.settled().await;
            return;
        }
        // Warm up.
        saturate(gateway, conns, 1).await;
        saturate(bare, conns, 1).await;
        if std::env::var("SKILLGATE_BENCH_PROFILE").is_ok()
            && std::env::var("SKILLGATE_BENCH_RUNS").as_deref() == Ok("alternate")
        {
            let load = tokio::spawn(saturate(gateway, conns, secs));
            record_cost::alternate(bus.runs(), &ANSWERED, secs).await;
            load.await.unwrap();
            return;
        }
        if std::env::var("SKILLGATE_BENCH_PROFILE").is_ok() {
            // Only the gateway at saturation, for a profiler.
            println!("{:.0} req/s", saturate(gateway, conns, secs).await);
            let runs = bus.runs();
            runs.settled().await;
            println!(
                "runs record {}: {} recorded, {} dropped",
                if runs.on() { "on" } else { "off" },
                runs.written_total(),
                runs.dropped_total()
            );
            return;
        }
        let bare_rps = saturate(bare, conns, secs).await;
        let gateway_rps = saturate(gateway, conns, secs).await;
        let half = gateway_rps / 2.0;
        let bare_lat = paced(bare, conns, half, secs).await;
        let gateway_lat = paced(gateway, conns, half, secs).await;
        println!("POST /invoke/noop, {conns} connections, {secs} s per phase, release build");
        println!(
            "{:<22} {:>10} {:>14} {:>10} {:>10}",
            "server", "req/s", "half load r/s", "p50 ms", "p99 ms"
        );
        for (name, rps, lat) in [
            ("bare axum handler", bare_rps, &bare_lat),
            ("skillgate gateway", gateway_rps, &gateway_lat),
        ] {
            println!(
                "{name:<22} {rps:>10.0} {half:>14.0} {:>10.3} {:>10.3}",
                pct(lat, 0.50),
                pct(lat, 0.99)
            );
        }
        println!(
            "gateway / bare: {:.0}% of the bare handler's requests/s (target at least 75%)",
            100.0 * gateway_rps / bare_rps
        );
        let bare_p99 = pct(&bare_lat, 0.99);
        for (row, rps, lat) in [
            ("bare axum handler", bare_rps, &bare_lat),
            ("skillgate gateway", gateway_rps, &gateway_lat),
        ] {
            common::report::record(
                "http",
                row,
                json!({
                    "req_per_s": rps,
                    "p50_ms": pct(lat, 0.50),
                    "p99_ms": pct(lat, 0.99),
                    "of_bare_req_per_s": rps / bare_rps,
                    "p99_of_bare": pct(lat, 0.99) / bare_p99,
                }),
            );
        }

        let runs = bus.runs();
        println!(
            "runs record {}: {} recorded, {} dropped",
            if runs.on() { "on" } else { "off" },
            runs.written_total(),
            runs.dropped_total()
        );
    });
}
