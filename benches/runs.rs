//! What the runs record costs a run, part by part. Each part is measured on its own, so a
//! change to one shows above the noise of a whole loaded server (`benches/runs-cost` gives that
//! whole figure).
//!
//! - `runs/dispatch_noop/off` and `/on`: a no-op run dispatched through the gateway as a door
//!   does, and awaited, on one thread, with the record off and on. The record's writer task
//!   runs on the store's writer thread, not that one (`events::sqlite_runs`). So on − off is
//!   what the record adds on the doors' threads.
//! - `runs/write_sqlite`: batches of 1,024 no-op runs written to the SQLite store `serve` uses
//!   by default. Its time a run is what the database's side adds (the writer's binding and
//!   SQLite's insert).
//!
//! - `SKILLGATE_BENCH_COUNT=n`: no criterion; `n` runs dispatched and written, for a counting
//!   profiler (`benches/runs-instructions`: instructions a run, record on and off, under
//!   callgrind).
//!
//! Run: `cargo bench --bench runs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use serde_json::json;
use skillgate::events::records::{NewRun, Records};
use skillgate::events::runs::RecordConfig;
use skillgate::gateway::metrics::Metrics;
use skillgate::gateway::reply::ReplyPart;
use skillgate::gateway::{Gateway, Inbound};
use skillgate::kernel::authority::{Authority, Principal};
use skillgate::middleware::native;

/// The same allocator as the `skillgate` binary, so the figures are what users get.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn sqlite(dir: &std::path::Path) -> skillgate::events::sqlite::SqliteStore {
    skillgate::events::sqlite::SqliteStore::open(
        &dir.join("events.db"),
        skillgate::events::Limits::default(),
        false,
    )
    .await
    .expect("open the SQLite store")
}

/// A gateway serving a no-op native skill on the SQLite store `serve` uses by default (in `dir`).
fn noop_gateway(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> Gateway {
    rt.block_on(async {
        let store = sqlite(dir).await;
        let bus = skillgate::events::Bus::new(Arc::new(store), Default::default());
        let kernel =
            skillgate::events::WithBus::bus(skillgate::builtins::builder(dir), Arc::new(bus))
                .native(native(
                    "name: noop\ndescription: Does nothing.\n",
                    |_ctx, _args| async move { Ok(Some(json!({ "ok": true }))) },
                ))
                .build();
        Gateway::new(kernel, Arc::new(Metrics::new()))
    })
}

/// Dispatches one no-op run as a door does and waits for its answer.
async fn dispatch_one(gateway: &Gateway) {
    let inbound = Inbound::call(
        "http",
        "noop",
        Authority::caller(Principal::local()),
        json!({}),
        Duration::from_secs(10),
    );
    let mut dispatch = gateway.dispatch(inbound);
    loop {
        match dispatch.parts.recv().await {
            Some(ReplyPart::Done(outcome)) => {
                outcome.expect("noop answers");
                return;
            }
            Some(_) => {}
            None => panic!("the run ended without an answer"),
        }
    }
}

fn dispatch_noop(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = noop_gateway(&rt, dir.path());
    let bus = skillgate::events::KernelBus::bus(&gateway.kernel).clone();
    let runs = bus.runs();
    let mut group = c.benchmark_group("runs/dispatch_noop");
    for on in [false, true] {
        runs.configure(on.then(RecordConfig::default));
        group.bench_function(if on { "on" } else { "off" }, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        dispatch_one(&gateway).await;
                    }
                    let spent = start.elapsed();
                    // The writer catches up outside the time taken (a current-thread runtime
                    // runs it only while a call drives it).
                    runs.settled().await;
                    spent
                })
            })
        });
    }
    group.finish();
    assert_eq!(runs.dropped_total(), 0, "every run was written");
}

/// `SKILLGATE_BENCH_COUNT=n`: dispatches `n` no-op runs, after a few to warm up
/// ([`counting_starts`]), and writes every one (record on, or off with `SKILLGATE_BENCH_RUNS=0`),
/// with no timing of its own: for a counting profiler, whose figures do not depend on the
/// machine's noise (`benches/runs-instructions` runs it under
/// `valgrind --tool=callgrind` at two counts, each state, and gives the instructions a run).
fn counted(n: u64) {
    const SETTLE_EVERY: u64 = 1000;
    const WARM_UP: u64 = 500;
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = noop_gateway(&rt, dir.path());
    let bus = skillgate::events::KernelBus::bus(&gateway.kernel).clone();
    let runs = bus.runs();
    let on = std::env::var("SKILLGATE_BENCH_RUNS").as_deref() != Ok("0");
    runs.configure(on.then(RecordConfig::default));
    rt.block_on(async {
        for _ in 0..WARM_UP {
            dispatch_one(&gateway).await;
        }
        runs.settled().await;
        counting_starts();
        for i in 1..=n {
            dispatch_one(&gateway).await;
            // The writer kept up with, so no run is dropped however slowly a profiler runs
            // the process (the runs waiting are bounded).
            if i % SETTLE_EVERY == 0 {
                runs.settled().await;
            }
        }
        runs.settled().await;
    });
    assert_eq!(runs.dropped_total(), 0, "every run was written");
    let state = if on { "on" } else { "off" };
    println!(
        "{n} runs counted after {WARM_UP} to warm up, record {state}, {} written",
        runs.written_total()
    );
}

/// Where counting starts: the runs before it warmed the process up (the clock calibrated, the
/// store's statements prepared, the buffers grown). `benches/runs-instructions` has callgrind
/// count from here (`--dump-before`), so what a process does once is left out, some of which
/// runs for a span of wall time (quanta's calibration) and so is never the same twice under a
/// profiler.
#[inline(never)]
fn counting_starts() {
    std::hint::black_box(());
}

fn write_sqlite(c: &mut Criterion) {
    const BATCH: usize = 1024;
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = rt.block_on(sqlite(dir.path()));
    let ids: Vec<String> = (0..BATCH).map(|n| format!("{:016x}", n * 7919)).collect();
    let batch: Vec<NewRun<'_>> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| NewRun {
            id,
            door: "http",
            principal: "local",
            skill: "noop",
            started_ms: 1_800_000_000_000 + n as i64,
            duration_us: 7,
            status: "ok",
            problem: None,
            parent: None,
            args: "{}",
            result: Some(r#"{"ok":true}"#),
            detail: "{}",
        })
        .collect();
    let mut group = c.benchmark_group("runs");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("write_sqlite", |b| {
        b.iter(|| rt.block_on(store.put_runs(&batch)).expect("written"))
    });
    group.finish();
}

criterion_group!(benches, dispatch_noop, write_sqlite);

fn main() {
    // The subscriber `serve` installs, with its filter (see `benches/http.rs`).
    let _telemetry = skillgate::telemetry::init(
        skillgate::telemetry::LogFormat::Text,
        skillgate::telemetry::SERVE_FILTER,
    );
    if let Ok(n) = std::env::var("SKILLGATE_BENCH_COUNT") {
        counted(
            n.parse()
                .expect("SKILLGATE_BENCH_COUNT is a number of runs"),
        );
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
