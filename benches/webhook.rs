//! Webhook intake: signed Standard Webhooks deliveries, each with a new id, posted by `CONNS`
//! concurrent keep-alive clients for `SECS` seconds to a route of an in-process server: each is
//! verified, claimed once in the store, durably queued, then answered 202 (the route's worker runs
//! a no-op skill from the queue meanwhile). Deliveries/s and answer latency, on SQLite (a file in
//! a temporary folder) and on Postgres (`DATABASE_URL`, a schema of its own).
//!
//! Run: `cargo bench --bench webhook` (release). `SKILLGATE_BENCH_SECS` (default 5) and
//! `SKILLGATE_BENCH_CONNS` (default 16) change the load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::json;
use sha2::Sha256;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::sqlite::SqliteStore;
use skillgate::events::{Bus, BusConfig, EventStore, Limits, WithBus};
use skillgate::gateway::Gateway;
use skillgate::gateway::http::{HttpConfig, Server};
use skillgate::gateway::metrics::Metrics;
use skillgate::middleware::native;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The route reads its secret from this variable, which cargo sets for benchmarks.
const SECRET_ENV: &str = "CARGO_MANIFEST_DIR";

fn sign(secret: &str, id: &str, ts: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

async fn run(name: &str, store: Arc<dyn EventStore>, secs: u64, conns: u64) {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("main.skill.md"),
        format!(
            "---\nname: main\ndescription: Hooks.\nmetadata:\n  role: main\n  webhook:\n    routes:\n      - {{ path: /hooks/bench, secret: \"${{env.{SECRET_ENV}}}\", ref: noop }}\n---\nmain\n"
        ),
    )
    .unwrap();
    let bus = Arc::new(Bus::new(
        store,
        BusConfig::with_visibility(Duration::from_secs(30)),
    ));
    let kernel = skillgate::builtins::builder(project.path())
        .bus(bus)
        .native(native(
            "name: noop\ndescription: Does nothing.\n",
            |_ctx, _args| async move { Ok(Some(json!(true))) },
        ))
        .build();
    let config = HttpConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        rate_per_second: 0,
        ..HttpConfig::default()
    };
    let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
    let server = Server::bind(gateway, config, project.path())
        .await
        .expect("bind");
    let url = format!("http://{}/hooks/bench", server.local_addr());
    tokio::spawn(server.run(std::future::pending()));
    let secret = std::env::var(SECRET_ENV).expect("cargo sets CARGO_MANIFEST_DIR");
    let accepted = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let next_id = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..conns {
        let (url, secret) = (url.clone(), secret.clone());
        let (accepted, latencies, next_id) = (accepted.clone(), latencies.clone(), next_id.clone());
        clients.push(tokio::spawn(async move {
            skillgate::tls::install();
            let client = reqwest::Client::new();
            let mut mine = Vec::new();
            while Instant::now() < end {
                let id = format!("msg_{}", next_id.fetch_add(1, Ordering::Relaxed));
                let ts = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                let body = format!(r#"{{"order":"{id}","amount":42}}"#);
                let signature = sign(&secret, &id, ts, &body);
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .header("webhook-id", &id)
                    .header("webhook-timestamp", ts.to_string())
                    .header("webhook-signature", signature)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("sent");
                if response.status() == 202 {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    mine.push(sent.elapsed().as_micros() as u64);
                }
            }
            latencies.lock().append(&mut mine);
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut all = std::mem::take(&mut *latencies.lock());
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len().max(1) - 1) as f64 * p) as usize)
            .map_or(f64::NAN, |v| *v as f64 / 1000.0)
    };
    println!(
        "| {name} | {conns} | {:.0} | {:.2} ms | {:.2} ms |",
        accepted.load(Ordering::Relaxed) as f64 / elapsed,
        pct(0.5),
        pct(0.99)
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
        println!("| store | clients | deliveries/s | p50 | p99 |\n|---|---|---|---|---|");
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(&dir.path().join("events.db"), Limits::default(), false)
            .await
            .expect("sqlite");
        run("sqlite", Arc::new(sqlite), secs, conns).await;
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let schema = format!("bench_webhook_{}", std::process::id());
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
