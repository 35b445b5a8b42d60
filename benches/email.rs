//! SMTP intake: `CONNS` lettre clients each send mail after mail (one SMTP session per mail,
//! a new Message-ID each) for `SECS` seconds to the listener of an in-process server: parsed,
//! claimed once in the store, durably queued, answered 250 (the worker runs a no-op skill and
//! sends no answer: no relay). Messages/s and the time from connect to 250, on SQLite (a file in
//! a temporary folder) and Postgres (`DATABASE_URL`, a schema of its own).
//!
//! Run: `cargo bench --bench email` (release). `SKILLGATE_BENCH_SECS` (default 5) and
//! `SKILLGATE_BENCH_CONNS` (default 16) change the load.

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use skillgate::config::values::Seconds;
use skillgate::events::EventStore;
use skillgate::gateway::email::EmailSettings;
use skillgate::gateway::email::config::SmtpSettings;
use skillgate::gateway::http::HttpConfig;

use common::env_or;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn run(name: &str, store: Arc<dyn EventStore>, secs: u64, conns: u64) {
    let project = tempfile::tempdir().unwrap();
    let config = HttpConfig {
        email: EmailSettings {
            from: Some("bot@bench.test".into()),
            smtp: Some(SmtpSettings {
                bind: Some("127.0.0.1:0".into()),
                ..SmtpSettings::default()
            }),
            default: Some("noop".into()),
            reply_window: Some(Seconds(Duration::ZERO)),
            ..EmailSettings::default()
        },
        ..common::config()
    };
    let server = common::server(project.path(), store, config).await;
    let smtp = server.email_addr().expect("smtp");
    tokio::spawn(server.run(std::future::pending()));
    let transport = move || {
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.ip().to_string())
            .port(smtp.port())
            .build()
    };
    let (rate, latencies) = common::saturate(
        conns,
        secs,
        &Arc::new(AtomicU64::new(0)),
        transport,
        |transport, n| async move {
            let message = Message::builder()
                .from("ada@example.org".parse().unwrap())
                .to("bot@bench.test".parse().unwrap())
                .subject(format!("report {n}"))
                .message_id(Some(format!("<bench{n}@example.org>")))
                .body(format!("Please send report {n}.\n"))
                .unwrap();
            let sent = Instant::now();
            transport
                .send(message)
                .await
                .ok()
                .map(|_| sent.elapsed().as_micros() as u64)
        },
    )
    .await;
    let (p50, p99) = common::percentiles(latencies);
    println!("| {name} | {conns} | {rate:.0} | {p50:.2} ms | {p99:.2} ms |");
}

fn main() {
    let secs = env_or("SKILLGATE_BENCH_SECS", 5);
    let conns = env_or("SKILLGATE_BENCH_CONNS", 16);
    common::runtime().block_on(async {
        println!(
            "| store | clients | mails/s | session p50 | session p99 |\n|---|---|---|---|---|"
        );
        common::on_each_store("bench_email", |name, store| run(name, store, secs, conns)).await;
    });
}
