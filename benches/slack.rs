//! Slack Events API intake: signed `app_mention` events, each with a new `event_id`, posted to
//! `/slack/events` of an in-process server: verified, claimed once in the store, durably queued,
//! answered 200 (the worker answers each in its thread meanwhile, to a local stand-in for
//! Slack's Web API). Two phases per store: `CONNS` clients as fast as they go (events/s, ack
//! latency), then a steady 500 events/s (ack latency; Slack wants the ack within 3 s). SQLite (a
//! file in a temporary folder) and Postgres (`DATABASE_URL`, a schema of its own).
//!
//! Run: `cargo bench --bench slack` (release). `SKILLGATE_BENCH_SECS` (default 5) and
//! `SKILLGATE_BENCH_CONNS` (default 16) change the load.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::post;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;
use skillgate::config::values::Seconds;
use skillgate::events::EventStore;
use skillgate::gateway::slack::SlackSettings;
use skillgate::server::DoorSettings;

use common::env_or;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SECRET: &str = "bench-signing-secret";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn signature(ts: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    let hex = skillgate::digest::hex(&mac.finalize().into_bytes());
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

async fn run(name: &str, store: Arc<dyn EventStore>, secs: u64, conns: u64) {
    let project = tempfile::tempdir().unwrap();
    let config = DoorSettings {
        slack: SlackSettings {
            bot_token: Some("xoxb-bench".into()),
            signing_secret: Some(SECRET.into()),
            api_url: Some(fake_api().await),
            default: Some("noop".into()),
            post_interval: Some(Seconds(Duration::ZERO)),
            ..SlackSettings::default()
        },
        ..common::config()
    };
    let server = common::server(project.path(), store, config).await;
    let url = format!("http://{}/slack/events", server.http_addr().unwrap());
    common::serve_forever(server);
    skillgate::tls::install();
    let next = Arc::new(AtomicU64::new(0));
    let target = url.clone();
    let (rate, latencies) = common::saturate(
        conns,
        secs,
        &next,
        reqwest::Client::new,
        move |client, n| {
            let url = target.clone();
            async move { send(&client, &url, n).await }
        },
    )
    .await;
    let (p50, p99) = common::percentiles(latencies);
    println!("| {name} | saturation, {conns} clients | {rate:.0} | {p50:.2} ms | {p99:.2} ms |");
    common::report::record(
        "slack",
        &format!("{name}: saturation"),
        serde_json::json!({ "clients": conns, "events_per_s": rate, "p50_ms": p50, "p99_ms": p99 }),
    );
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
    let (p50, p99) = common::percentiles(steady);
    println!(
        "| {name} | steady 500/s ({count} acked) | {:.0} | {p50:.2} ms | {p99:.2} ms |",
        count as f64 / secs as f64
    );
    common::report::record(
        "slack",
        &format!("{name}: steady 500/s"),
        serde_json::json!({ "events_per_s": count as f64 / secs as f64, "p50_ms": p50, "p99_ms": p99 }),
    );
}

fn main() {
    let secs = env_or("SKILLGATE_BENCH_SECS", 5);
    let conns = env_or("SKILLGATE_BENCH_CONNS", 16);
    common::runtime().block_on(async {
        println!("| store | load | events/s | ack p50 | ack p99 |\n|---|---|---|---|---|");
        common::on_each_store("bench_slack", |name, store| run(name, store, secs, conns)).await;
    });
}
