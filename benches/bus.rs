//! Event bus load benchmark: emit + deliver + ack throughput and publish-to-deliver latency
//! (p50/p99) for each store, with 1 and 16 consumers, acks one by one and in batches.
//!
//! Run: `cargo bench --bench bus` (Postgres rows need `DATABASE_URL`). Prints one table.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use skillgate::events::memory::MemoryStore;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::sqlite::SqliteStore;
use skillgate::events::{Event, EventStore, Limits};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PRODUCERS: u64 = 8;

struct Figures {
    rate: f64,
    p50: Duration,
    p99: Duration,
}

async fn load(store: Arc<dyn EventStore>, consumers: usize, batch: bool, total: u64) -> Figures {
    let topic = format!(
        "bench{}",
        skillgate::context::id::format(skillgate::context::id::next_id())
    );
    store.create_queue(&topic, "q", false).await.expect("queue");
    let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let (store, topic, sent) = (store.clone(), topic.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            for n in (p..total).step_by(PRODUCERS as usize) {
                let mut event = Event::new(&topic, "bench");
                event.data = Some(json!({ "n": n }));
                sent.lock().insert(n, Instant::now());
                store.emit(&event).await.expect("emit");
                // The memory store never waits: let consumers run.
                tokio::task::yield_now().await;
            }
        }));
    }
    for _ in 0..consumers {
        let (store, topic, sent, latencies, done) = (
            store.clone(),
            topic.clone(),
            sent.clone(),
            latencies.clone(),
            done.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let max = if batch { 64 } else { 1 };
            let mut wakeups = store.wakeups();
            while done.load(std::sync::atomic::Ordering::Relaxed) < total {
                let got = store
                    .claim(&topic, "q", max, Duration::from_secs(30))
                    .await
                    .expect("claim");
                if got.is_empty() {
                    tokio::select! {
                        _ = wakeups.recv() => {}
                        () = tokio::time::sleep(Duration::from_millis(5)) => {}
                    }
                    continue;
                }
                let now = Instant::now();
                {
                    let sent = sent.lock();
                    let mut lat = latencies.lock();
                    for d in &got {
                        let n = d
                            .event
                            .data
                            .as_ref()
                            .and_then(|v| v["n"].as_u64())
                            .unwrap_or(0);
                        if let Some(at) = sent.get(&n) {
                            lat.push(now - *at);
                        }
                    }
                }
                let ids: Vec<String> = got.iter().map(|d| d.event.id.clone()).collect();
                if batch {
                    store.ack(&topic, "q", &ids).await.expect("ack");
                } else {
                    for id in &ids {
                        store
                            .ack(&topic, "q", std::slice::from_ref(id))
                            .await
                            .expect("ack");
                    }
                }
                done.fetch_add(ids.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let elapsed = started.elapsed();
    let mut lat = latencies.lock().clone();
    lat.sort();
    let pick = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
    Figures {
        rate: total as f64 / elapsed.as_secs_f64(),
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("dir");
        let mut stores: Vec<(&str, Arc<dyn EventStore>, u64)> = vec![
            (
                "memory",
                Arc::new(MemoryStore::new(Limits::default())),
                50_000,
            ),
            (
                "sqlite",
                Arc::new(
                    SqliteStore::open(&dir.path().join("bench.db"), Limits::default(), false)
                        .await
                        .expect("sqlite"),
                ),
                10_000,
            ),
        ];
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let schema = format!("bench{}", std::process::id());
            let store = PostgresStore::connect(&url, Some(&schema), Limits::default())
                .await
                .expect("postgres");
            stores.push(("postgres", Arc::new(store), 10_000));
        } else {
            eprintln!("postgres: skipped (set DATABASE_URL)");
        }
        println!("| store | consumers | acks | msg/s | p50 | p99 |");
        println!("|---|---|---|---|---|---|");
        for (name, store, total) in stores {
            for consumers in [1, 16] {
                for batch in [false, true] {
                    let f = load(store.clone(), consumers, batch, total).await;
                    println!(
                        "| {name} | {consumers} | {} | {:.0} | {:.2} ms | {:.2} ms |",
                        if batch { "batched" } else { "one by one" },
                        f.rate,
                        f.p50.as_secs_f64() * 1000.0,
                        f.p99.as_secs_f64() * 1000.0
                    );
                }
            }
        }
    });
}
