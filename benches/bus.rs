//! Event bus load benchmark, per store (memory, SQLite, Postgres), in phases that do the same
//! work as a job queue's benchmark so the figures can be set side by side:
//!
//! - `enqueue`: 4 producers emitting batches of 100 (`emit_many`);
//! - `drain`: a backlog emitted beforehand, drained by 16 tasks sharing one consumer
//!   (prefetch 500, each ack sent one by one and flushed in batches);
//! - `flat out`: 8 or 64 producers emitting one event at a time (each waiting for its commit)
//!   while 1 or 16 tasks consume;
//! - `steady`: publish → handler latency at a steady 100/s (16 tasks) and 1,000/s (1 task).
//!
//! Run: `cargo bench --bench bus` (Postgres rows need `DATABASE_URL`). Prints one table.
//! `BUS_BENCH="postgres drain"` (any words) keeps only the rows whose store or phase contains
//! every word.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use skillgate::events::memory::MemoryStore;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::sqlite::SqliteStore;
use skillgate::events::{Consumer, ConsumerOptions, Event, EventStore, Limits};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Phase = Box<
    dyn Fn(Arc<dyn EventStore>) -> std::pin::Pin<Box<dyn std::future::Future<Output = Figures>>>,
>;

/// What a phase measured: a rate, and latencies where the phase has them.
struct Figures {
    rate: f64,
    latency: Option<(Duration, Duration)>,
}

/// When each numbered event was published, and how long each took to reach a handler.
#[derive(Default)]
struct Clock {
    sent: Mutex<HashMap<u64, Instant>>,
    seen: Mutex<Vec<Duration>>,
}

impl Clock {
    fn send(&self, n: u64) {
        self.sent.lock().insert(n, Instant::now());
    }

    fn arrive(&self, event: &Event) {
        let n = number(event);
        if let Some(at) = self.sent.lock().get(&n) {
            self.seen.lock().push(at.elapsed());
        }
    }

    fn percentiles(&self) -> (Duration, Duration) {
        let mut seen = self.seen.lock().clone();
        seen.sort();
        let pick = |q: f64| seen[((seen.len() as f64 - 1.0) * q) as usize];
        (pick(0.50), pick(0.99))
    }
}

fn number(event: &Event) -> u64 {
    event
        .data
        .as_ref()
        .and_then(|d| d["n"].as_u64())
        .unwrap_or(u64::MAX)
}

fn numbered(topic: &str, n: u64) -> Event {
    let mut event = Event::new(topic, "bench");
    event.data = Some(json!({ "n": n }));
    event
}

async fn fresh_topic(store: &Arc<dyn EventStore>) -> String {
    let topic = format!(
        "bench{}",
        skillgate::context::id::format(skillgate::context::id::next_id())
    );
    store.create_queue(&topic, "q", false).await.expect("queue");
    topic
}

fn consumer(store: &Arc<dyn EventStore>, topic: &str, prefetch: usize) -> Arc<Consumer> {
    Arc::new(Consumer::start(
        store.clone(),
        topic,
        "q",
        ConsumerOptions {
            prefetch,
            visibility: Duration::from_secs(60),
        },
        CancellationToken::new(),
    ))
}

/// `tasks` tasks take from `consumer` until `total` were handled, each acked one by one.
async fn handle_all(consumer: Arc<Consumer>, tasks: usize, total: u64, clock: Arc<Clock>) {
    let done = Arc::new(AtomicU64::new(0));
    let mut running = Vec::new();
    for _ in 0..tasks {
        let (consumer, done, clock) = (consumer.clone(), done.clone(), clock.clone());
        running.push(tokio::spawn(async move {
            while done.load(Ordering::Relaxed) < total {
                let next = tokio::time::timeout(Duration::from_millis(100), consumer.next()).await;
                let Ok(Some(delivery)) = next else { continue };
                clock.arrive(&delivery.event);
                consumer.ack(delivery.receipt);
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in running {
        task.await.expect("consumer task");
    }
    consumer.flush().await;
    consumer.close().await;
}

async fn enqueue(store: Arc<dyn EventStore>, total: u64) -> Figures {
    let topic = fresh_topic(&store).await;
    let started = Instant::now();
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let (store, topic) = (store.clone(), topic.clone());
            tokio::spawn(async move {
                let mut n = p * 100;
                while n < total {
                    let batch: Vec<Event> = (n..(n + 100).min(total))
                        .map(|k| numbered(&topic, k))
                        .collect();
                    store.emit_many(&batch).await.expect("emit_many");
                    n += 400;
                }
            })
        })
        .collect();
    for p in producers {
        p.await.expect("producer");
    }
    Figures {
        rate: total as f64 / started.elapsed().as_secs_f64(),
        latency: None,
    }
}

async fn drain(store: Arc<dyn EventStore>, total: u64) -> Figures {
    let topic = fresh_topic(&store).await;
    let batch: Vec<Event> = (0..total).map(|n| numbered(&topic, n)).collect();
    for chunk in batch.chunks(500) {
        store.emit_many(chunk).await.expect("backlog");
    }
    let started = Instant::now();
    handle_all(consumer(&store, &topic, 500), 16, total, Arc::default()).await;
    Figures {
        rate: total as f64 / started.elapsed().as_secs_f64(),
        latency: None,
    }
}

async fn flat_out(
    store: Arc<dyn EventStore>,
    producers: u64,
    consumers: usize,
    total: u64,
) -> Figures {
    let topic = fresh_topic(&store).await;
    let clock = Arc::new(Clock::default());
    let started = Instant::now();
    let producers: Vec<_> = (0..producers)
        .map(|p| {
            let (store, topic, clock) = (store.clone(), topic.clone(), clock.clone());
            tokio::spawn(async move {
                for n in (p..total).step_by(producers as usize) {
                    clock.send(n);
                    store.emit(&numbered(&topic, n)).await.expect("emit");
                    // The memory store never waits: let the consumers run.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let prefetch = 64;
    handle_all(
        consumer(&store, &topic, prefetch),
        consumers,
        total,
        clock.clone(),
    )
    .await;
    for p in producers {
        p.await.expect("producer");
    }
    Figures {
        rate: total as f64 / started.elapsed().as_secs_f64(),
        latency: Some(clock.percentiles()),
    }
}

async fn steady(store: Arc<dyn EventStore>, per_second: u64, tasks: usize, total: u64) -> Figures {
    let topic = fresh_topic(&store).await;
    let clock = Arc::new(Clock::default());
    let consuming = tokio::spawn(handle_all(
        consumer(&store, &topic, 64),
        tasks,
        total,
        clock.clone(),
    ));
    // Let the consumer reach its idle wait before the first publish.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for n in 0..total {
        tick.tick().await;
        let (store, topic, clock) = (store.clone(), topic.clone(), clock.clone());
        // Publishers do not wait for each other: each publish is its own request.
        tokio::spawn(async move {
            clock.send(n);
            store.emit(&numbered(&topic, n)).await.expect("emit");
        });
    }
    consuming.await.expect("consumer");
    Figures {
        rate: total as f64 / started.elapsed().as_secs_f64(),
        latency: Some(clock.percentiles()),
    }
}

/// Whether `BUS_BENCH` asks for this store's phase.
fn wanted(store: &str, phase: &str) -> bool {
    match std::env::var("BUS_BENCH") {
        Ok(words) if !words.trim().is_empty() => words
            .split([',', ' '])
            .filter(|w| !w.is_empty())
            .all(|w| store.contains(w) || phase.contains(w)),
        _ => true,
    }
}

fn row(store: &str, phase: &str, figures: Figures) {
    let (p50, p99) = match figures.latency {
        Some((p50, p99)) => (
            format!("{:.2} ms", p50.as_secs_f64() * 1000.0),
            format!("{:.2} ms", p99.as_secs_f64() * 1000.0),
        ),
        None => ("".into(), "".into()),
    };
    println!(
        "| {store} | {phase} | {:.0} | {p50} | {p99} |",
        figures.rate
    );
    let mut recorded = serde_json::json!({ "events_per_s": figures.rate });
    if let Some((p50, p99)) = figures.latency {
        recorded["p50_ms"] = (p50.as_secs_f64() * 1000.0).into();
        recorded["p99_ms"] = (p99.as_secs_f64() * 1000.0).into();
    }
    common::report::record("bus", &format!("{store}: {phase}"), recorded);
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("dir");
        let limits = Limits::default();
        let mut stores: Vec<(&str, Arc<dyn EventStore>, u64)> = vec![
            (
                "memory",
                Arc::new(MemoryStore::new(limits.clone())),
                100_000,
            ),
            (
                "sqlite",
                Arc::new(
                    SqliteStore::open(&dir.path().join("bench.db"), limits.clone(), false)
                        .await
                        .expect("sqlite"),
                ),
                30_000,
            ),
        ];
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let schema = format!("bench{}", std::process::id());
            let store = PostgresStore::connect(&url, Some(&schema), limits.clone())
                .await
                .expect("postgres");
            stores.push(("postgres", Arc::new(store), 50_000));
        } else {
            eprintln!("postgres: skipped (set DATABASE_URL)");
        }
        println!("| store | phase | events/s | p50 | p99 |");
        println!("|---|---|---|---|---|");
        for (name, store, total) in stores {
            let store = &store;
            let phases: Vec<(String, Phase)> = vec![
                (
                    "enqueue, batches of 100".into(),
                    Box::new(move |s| Box::pin(enqueue(s, total))),
                ),
                (
                    "drain a backlog, 16 consumers".into(),
                    Box::new(move |s| Box::pin(drain(s, total))),
                ),
                (
                    "8 producers, 1 consumer, acks one by one".into(),
                    Box::new(move |s| Box::pin(flat_out(s, 8, 1, total / 5))),
                ),
                (
                    "8 producers, 16 consumers, acks one by one".into(),
                    Box::new(move |s| Box::pin(flat_out(s, 8, 16, total / 5))),
                ),
                (
                    "64 producers, 16 consumers, acks one by one".into(),
                    Box::new(move |s| Box::pin(flat_out(s, 64, 16, total / 5))),
                ),
                (
                    "steady 100/s, 16 consumers".into(),
                    Box::new(|s| Box::pin(steady(s, 100, 16, 500))),
                ),
                (
                    "steady 1000/s, 1 consumer, acks one by one".into(),
                    Box::new(|s| Box::pin(steady(s, 1000, 1, 5000))),
                ),
            ];
            for (phase, run) in phases {
                if wanted(name, &phase) {
                    row(name, &phase, run(store.clone()).await);
                }
            }
        }
        // The Postgres store's schema goes with the run (its stores are dropped by now).
        if let Ok(url) = std::env::var("DATABASE_URL") {
            drop_schema(&url, &format!("bench{}", std::process::id())).await;
        }
    });
}

/// Drops `schema` from the database `url` names, saying so if it cannot.
async fn drop_schema(url: &str, schema: &str) {
    let dropped = async {
        let mut db = sqlx::PgConnection::connect(url).await?;
        sqlx::query("SET lock_timeout = '10s'")
            .execute(&mut db)
            .await?;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&mut db)
            .await
    };
    if let Err(err) = dropped.await {
        eprintln!("postgres: the bench's schema `{schema}` is left behind: {err}");
    }
}
