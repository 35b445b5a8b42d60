//! Sandbox benchmarks: a fresh sandbox that runs `await ctx.manager.invoke('noop')` and returns,
//! through the full pipeline.
//!
//! - `sandbox/skill_js`: invoking a `.skill.js` skill (`kernel.invoke("bench-js")`): the JS skill's
//!   pipeline, a fresh QuickJS runtime and context, the prelude, loading the module, the bridge
//!   call to `noop` (its own pipeline) and the return.
//! - `sandbox/untrusted`: the same code run with `sandbox::run_untrusted` as an anonymous inline
//!   skill (what the agent's `invoke` tool does): its cascade is resolved per call.
//! - `sandbox/skill_js_100_at_once`: 100 such calls started together on one thread; the figure is
//!   the time for the batch divided by 100.
//!
//! Before the criterion groups, per-call latency percentiles (p50, p99) are printed for one call
//! at a time and for 100 at once (each call's own latency, from the batch start to its end).
//!
//! Run: `cargo bench --bench sandbox`.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::future::join_all;
use serde_json::{Value, json};
use skillgate::middleware::native;
use skillgate::{InvokeOptions, Kernel, sandbox};

/// The same allocator as the `skillgate` binary, so the figures are what users get.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BENCH_JS: &str =
    "export default async function (ctx) {\n  await ctx.manager.invoke('noop');\n}\n";

fn kernel() -> (tempfile::TempDir, Kernel) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("skills")).expect("skills dir");
    std::fs::write(dir.path().join("skills/bench-js.skill.js"), BENCH_JS).expect("write skill");
    let kernel = skillgate::builtins::builder(dir.path())
        .native(native("name: noop\n", |_ctx, _args| async move {
            Ok(Some(Value::Bool(true)))
        }))
        .native(native("name: run-code\n", |ctx, _args| async move {
            sandbox::run_untrusted(&ctx, "await ctx.manager.invoke('noop');", None).await
        }))
        .build();
    (dir, kernel)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn call(kernel: &Kernel, name: &str) -> Duration {
    let start = Instant::now();
    let out = kernel
        .invoke(name, json!({}), InvokeOptions::default())
        .await;
    let took = start.elapsed();
    black_box(out.expect("bench call runs"));
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn report(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let (p50, p99) = (
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
    );
    println!("{label}: n={} p50={p50:.1}µs p99={p99:.1}µs", samples.len());
    common::report::record("sandbox", label, json!({ "p50_us": p50, "p99_us": p99 }));
}

/// Per-call latency percentiles, printed once before the criterion groups.
fn percentiles(_c: &mut Criterion) {
    let rt = runtime();
    let (_dir, kernel) = kernel();
    for name in ["bench-js", "run-code"] {
        // Warm up (allocator, caches of the pipeline).
        rt.block_on(async {
            for _ in 0..200 {
                call(&kernel, name).await;
            }
        });
        let one = rt.block_on(async {
            let mut samples = Vec::with_capacity(5000);
            for _ in 0..5000 {
                samples.push(call(&kernel, name).await);
            }
            samples
        });
        report(&format!("latency/{name}/one_at_a_time"), one);
        let batch = rt.block_on(async {
            let mut samples = Vec::with_capacity(5000);
            let mut per_call = Vec::with_capacity(50);
            for _ in 0..50 {
                let start = Instant::now();
                let ends = join_all((0..100).map(|_| async {
                    let out = kernel
                        .invoke(name, json!({}), InvokeOptions::default())
                        .await;
                    black_box(out.expect("bench call runs"));
                    start.elapsed()
                }))
                .await;
                per_call.push(start.elapsed() / 100);
                samples.extend(ends);
            }
            (samples, per_call)
        });
        report(&format!("latency/{name}/100_at_once"), batch.0);
        report(&format!("throughput/{name}/100_at_once_per_call"), batch.1);
    }
}

fn fresh_sandbox(c: &mut Criterion) {
    let rt = runtime();
    let (_dir, kernel) = kernel();
    let mut group = c.benchmark_group("sandbox");
    group.bench_function("skill_js", |b| {
        b.iter(|| rt.block_on(call(&kernel, "bench-js")));
    });
    group.bench_function("untrusted", |b| {
        b.iter(|| rt.block_on(call(&kernel, "run-code")));
    });
    group.bench_function("skill_js_100_at_once", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                rt.block_on(join_all((0..100).map(|_| call(&kernel, "bench-js"))));
            }
            start.elapsed() / 100
        });
    });
    group.finish();
}

criterion_group!(benches, percentiles, fresh_sandbox);
criterion_main!(benches);
