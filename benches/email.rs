//! SMTP intake: `CONNS` lettre clients each send mail after mail (one SMTP session per mail,
//! a new Message-ID each) for `SECS` seconds to the listener of an in-process server: parsed,
//! claimed once in the store, durably queued, answered 250 (the worker runs a no-op skill and
//! sends no answer: no relay). Messages/s and the time from connect to 250, on SQLite (a file in
//! a temporary folder) and Postgres (`DATABASE_URL`, a schema of its own).
//!
//! Run: `cargo bench --bench email` (release). `SKILLGATE_BENCH_SECS` (default 5) and
//! `SKILLGATE_BENCH_CONNS` (default 16) change the load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use parking_lot::Mutex;
use serde_json::json;
use skillgate::config::values::Seconds;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::sqlite::SqliteStore;
use skillgate::events::{Bus, BusConfig, EventStore, Limits, WithBus};
use skillgate::gateway::Gateway;
use skillgate::gateway::email::EmailSettings;
use skillgate::gateway::email::config::SmtpSettings;
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
        email: EmailSettings {
            from: Some("bot@bench.test".into()),
            smtp: Some(SmtpSettings {
                bind: Some("127.0.0.1:0".into()),
                hostname: None,
            }),
            default: Some("noop".into()),
            reply_window: Some(Seconds(Duration::ZERO)),
            ..EmailSettings::default()
        },
        ..HttpConfig::default()
    };
    let gateway = Gateway::new(kernel, Arc::new(Metrics::new()));
    let server = Server::bind(gateway, config, project.path())
        .await
        .expect("bind");
    let smtp = server.email_addr().expect("smtp");
    tokio::spawn(server.run(std::future::pending()));
    let next = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..conns {
        let (next, accepted, latencies) = (next.clone(), accepted.clone(), latencies.clone());
        clients.push(tokio::spawn(async move {
            let transport =
                AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.ip().to_string())
                    .port(smtp.port())
                    .build();
            let mut mine = Vec::new();
            while Instant::now() < end {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let message = Message::builder()
                    .from("ada@example.org".parse().unwrap())
                    .to("bot@bench.test".parse().unwrap())
                    .subject(format!("report {n}"))
                    .message_id(Some(format!("<bench{n}@example.org>")))
                    .body(format!("Please send report {n}.\n"))
                    .unwrap();
                let sent = Instant::now();
                if transport.send(message).await.is_ok() {
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
    let rate = accepted.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    let mut all = std::mem::take(&mut *latencies.lock());
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len().max(1) - 1) as f64 * p) as usize)
            .map_or(f64::NAN, |v| *v as f64 / 1000.0)
    };
    println!(
        "| {name} | {conns} | {rate:.0} | {:.2} ms | {:.2} ms |",
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
        println!(
            "| store | clients | mails/s | session p50 | session p99 |\n|---|---|---|---|---|"
        );
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(&dir.path().join("events.db"), Limits::default(), false)
            .await
            .expect("sqlite");
        run("sqlite", Arc::new(sqlite), secs, conns).await;
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let schema = format!("bench_email_{}", std::process::id());
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
