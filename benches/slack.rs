//! Slack Events API intake: signed `app_mention` events, each with a new `event_id`, posted to
//! `/slack/events` of an in-process server: verified, claimed once in the store, durably queued,
//! answered 200 (the worker answers each in its thread meanwhile, to a local stand-in for
//! Slack's Web API). Two phases per store: `CONNS` clients as fast as they go (events/s, ack
//! latency), then a steady 500 events/s (ack latency; Slack wants the ack within 3 s). SQLite (a
//! file in a temporary folder) and Postgres (`DATABASE_URL`, a schema of its own).
//!
//! Run: `cargo bench --bench slack` (release). `SKILLGATE_BENCH_SECS` (default 5) and
//! `SKILLGATE_BENCH_CONNS` (default 16) change the load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::post;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::json;
use sha2::Sha256;
use skillgate::config::values::Seconds;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::sqlite::SqliteStore;
use skillgate::events::{Bus, BusConfig, EventStore, Limits, WithBus};
use skillgate::gateway::Gateway;
use skillgate::gateway::http::{HttpConfig, Server};
use skillgate::gateway::metrics::Metrics;
use skillgate::gateway::slack::SlackSettings;
use skillgate::middleware::native;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SECRET: &str = "bench-signing-secret";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn signature(ts: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("v0={hex}")
}

/// A stand-in for Slack's Web API that says `ok` to everything.
async fn fake_api() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/api/{method}",
        post(|| async {
            axum::Json(json!({ "ok": true, "ts": "1.0", "user_id": "UBOT", "user": "bench" }))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/api/")
}

/// One signed event post; its latency in µs when answered 200.
async fn send(client: &reqwest::Client, url: &str, n: u64) -> Option<u64> {
    let ts = now();
    let body = json!({
        "type": "event_callback", "team_id": "T1", "event_id": format!("EvB{n}"), "event_time": ts,
        "event": { "type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": format!("{ts}.{n:06}"), "channel": "C1" },
    })
    .to_string();
    let sent = Instant::now();
    let response = client
        .post(url)
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature(ts, &body))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .ok()?;
    (response.status() == 200).then(|| sent.elapsed().as_micros() as u64)
}

fn percentiles(mut all: Vec<u64>) -> (f64, f64) {
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len().max(1) - 1) as f64 * p) as usize)
            .map_or(f64::NAN, |v| *v as f64 / 1000.0)
    };
    (pct(0.5), pct(0.99))
}

async fn run(name: &str, store: Arc<dyn EventStore>, secs: u64, conns: u64) {
    let project = tempfile::tempdir().unwrap();
    let bus = Arc::new(Bus::new(
        store,
        BusConfig::with_visibility(Duration::from_secs(30)),
    ));
    let kernel = skillgate::builtins::builder(project.path())
        .bus(bus)
        .native(native(
            "name: noop\ndescription: Does nothing.\n",
            |_ctx, _args| async move { Ok(Some(json!("ok"))) },
        ))
        .build();
    let config = HttpConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        rate_per_second: 0,
        slack: SlackSettings {
            bot_token: Some("xoxb-bench".into()),
            signing_secret: Some(SECRET.into()),
            api_url: Some(fake_api().await),
            default: Some("noop".into()),
            post_interval: Some(Seconds(Duration::ZERO)),
            ..SlackSettings::default()
        },
        ..HttpConfig::default()
    };
    let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
    let server = Server::bind(gateway, config, project.path())
        .await
        .expect("bind");
    let url = format!("http://{}/slack/events", server.local_addr());
    tokio::spawn(server.run(std::future::pending()));
    skillgate::tls::install();
    let next = Arc::new(AtomicU64::new(0));
    // Saturation.
    let accepted = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..conns {
        let (url, next, accepted, latencies) = (
            url.clone(),
            next.clone(),
            accepted.clone(),
            latencies.clone(),
        );
        clients.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut mine = Vec::new();
            while Instant::now() < end {
                if let Some(us) = send(&client, &url, next.fetch_add(1, Ordering::Relaxed)).await {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    mine.push(us);
                }
            }
            latencies.lock().append(&mut mine);
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let rate = accepted.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    let (p50, p99) = percentiles(std::mem::take(&mut *latencies.lock()));
    println!("| {name} | saturation, {conns} clients | {rate:.0} | {p50:.2} ms | {p99:.2} ms |");
    // Let the worker catch up before the steady phase.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let client = reqwest::Client::new();
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut sends = Vec::new();
    while Instant::now() < end {
        tick.tick().await;
        let (client, url, n) = (
            client.clone(),
            url.clone(),
            next.fetch_add(1, Ordering::Relaxed),
        );
        sends.push(tokio::spawn(async move { send(&client, &url, n).await }));
    }
    let mut steady = Vec::new();
    for s in sends {
        if let Ok(Some(us)) = s.await {
            steady.push(us);
        }
    }
    let count = steady.len();
    let (p50, p99) = percentiles(steady);
    println!(
        "| {name} | steady 500/s ({count} acked) | {:.0} | {p50:.2} ms | {p99:.2} ms |",
        count as f64 / secs as f64
    );
}

fn main() {
    let secs = env_or("SKILLGATE_BENCH_SECS", 5);
    let conns = env_or("SKILLGATE_BENCH_CONNS", 16);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!("| store | load | events/s | ack p50 | ack p99 |\n|---|---|---|---|---|");
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(&dir.path().join("events.db"), Limits::default(), false)
            .await
            .expect("sqlite");
        run("sqlite", Arc::new(sqlite), secs, conns).await;
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let schema = format!("bench_slack_{}", std::process::id());
            let pg = PostgresStore::connect(&url, Some(&schema), Limits::default())
                .await
                .expect("postgres");
            run("postgres", Arc::new(pg), secs, conns).await;
            if let Ok(pool) = sqlx::PgPool::connect(&url).await {
                let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .execute(&pool)
                    .await;
            }
        }
    });
}
