//! Webhook intake: signed Standard Webhooks deliveries, each with a new id, posted by `CONNS`
//! concurrent keep-alive clients for `SECS` seconds to a route of an in-process server: each is
//! verified, claimed once in the store, durably queued, then answered 202 (the route's worker runs
//! a no-op skill from the queue meanwhile). Deliveries/s and answer latency, on SQLite (a file in
//! a temporary folder) and on Postgres (`DATABASE_URL`, a schema of its own).
//!
//! Run: `cargo bench --bench webhook` (release). `SKILLGATE_BENCH_SECS` (default 5) and
//! `SKILLGATE_BENCH_CONNS` (default 16) change the load.

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use skillgate::events::EventStore;

use common::env_or;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    let server = common::server(project.path(), store, common::config()).await;
    let url = format!("http://{}/hooks/bench", server.http_addr().unwrap());
    common::serve_forever(server);
    let secret = std::env::var(SECRET_ENV).expect("cargo sets CARGO_MANIFEST_DIR");
    skillgate::tls::install();
    let (rate, latencies) = common::saturate(
        conns,
        secs,
        &Arc::new(AtomicU64::new(0)),
        reqwest::Client::new,
        move |client, n| {
            let (url, secret) = (url.clone(), secret.clone());
            async move {
                let id = format!("msg_{n}");
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
                (response.status() == 202).then(|| sent.elapsed().as_micros() as u64)
            }
        },
    )
    .await;
    let (p50, p99) = common::percentiles(latencies);
    println!("| {name} | {conns} | {rate:.0} | {p50:.2} ms | {p99:.2} ms |");
    common::report::record(
        "webhook",
        name,
        serde_json::json!({ "clients": conns, "deliveries_per_s": rate, "p50_ms": p50, "p99_ms": p99 }),
    );
}

fn main() {
    let secs = env_or("SKILLGATE_BENCH_SECS", 5);
    let conns = env_or("SKILLGATE_BENCH_CONNS", 16);
    common::runtime().block_on(async {
        println!("| store | clients | deliveries/s | p50 | p99 |\n|---|---|---|---|---|");
        common::on_each_store("bench_webhook", |name, store| run(name, store, secs, conns)).await;
    });
}
