//! Kernel benchmarks: a no-op native skill through the full default pipeline (`invoke_noop`),
//! and the cost of extra no-op middleware layers (`per_layer`).
//!
//! `per_layer/leaf/N` uses middleware that opt out of inheritance (`$inherit: false`): each
//! layer is one nested invocation through the orchestrator with an empty pipeline of its own.
//! `per_layer/inheriting/N` uses middleware that inherit the default pipeline, so each layer
//! also runs the six pipeline middleware around its own body. Per-layer cost is the slope.
//!
//! `SKILLGATE_BENCH_COUNT=n` (with `SKILLGATE_BENCH_LAYERS=l`, default 0): no criterion; the
//! no-op skill invoked `n` times under `l` leaf layers, for a counting profiler
//! (`valgrind --tool=callgrind`: two counts of layers, the difference over the layers between
//! them, is what a layer executes).
//!
//! Both modes install the tracing subscriber `serve` does, so spans cost what they cost there.
//!
//! Run: `cargo bench --bench invoke`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group};
use serde_json::{Value, json};
use skillgate::middleware::native;
use skillgate::{InvokeOptions, Kernel};

/// The same allocator as the `skillgate` binary, so the figures are what users get.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn noop_skill(name: &str, keys: &[String]) -> skillgate::skills::Tool {
    let mut yaml = format!("name: {name}\nmetadata:\n");
    for key in keys {
        yaml.push_str(&format!("  {key}: true\n"));
    }
    if keys.is_empty() {
        yaml.push_str("  tags: [bench]\n");
    }
    native(
        &yaml,
        |_ctx, _args| async move { Ok(Some(Value::Bool(true))) },
    )
}

fn layer(name: &str, leaf: bool) -> skillgate::skills::Tool {
    let inherit = if leaf { "  $inherit: false\n" } else { "" };
    let yaml = format!("name: {name}\nmetadata:\n  role: middleware\n{inherit}");
    native(&yaml, |ctx, _args| async move {
        let target = ctx.ctx_target()?;
        target.next().await?;
        Ok(None)
    })
}

fn kernel(layers: usize, leaf: bool) -> (tempfile::TempDir, Kernel) {
    let dir = tempfile::tempdir().expect("temp dir");
    let names: Vec<String> = (0..layers).map(|i| format!("mw-{i}")).collect();
    let mut builder = skillgate::builtins::builder(dir.path()).native(noop_skill("noop", &names));
    for name in &names {
        builder = builder.native(layer(name, leaf));
    }
    (dir, builder.build())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

fn invoke_noop(c: &mut Criterion) {
    let rt = runtime();
    let (_dir, kernel) = kernel(0, true);
    c.bench_function("invoke_noop", |b| {
        b.iter(|| {
            let out = rt.block_on(kernel.invoke("noop", json!({}), InvokeOptions::default()));
            black_box(out.expect("noop runs"));
        })
    });
}

fn per_layer(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("per_layer");
    for leaf in [true, false] {
        let kind = if leaf { "leaf" } else { "inheriting" };
        for layers in [0usize, 1, 10, 100] {
            let (_dir, kernel) = kernel(layers, leaf);
            group.bench_with_input(BenchmarkId::new(kind, layers), &layers, |b, _| {
                b.iter(|| {
                    let out =
                        rt.block_on(kernel.invoke("noop", json!({}), InvokeOptions::default()));
                    black_box(out.expect("layered noop runs"));
                })
            });
        }
    }
    group.finish();
}

/// `SKILLGATE_BENCH_COUNT=n`: the no-op skill invoked `n` times under
/// `SKILLGATE_BENCH_LAYERS` leaf layers, with no timing of its own.
fn counted(n: u64) {
    let layers = std::env::var("SKILLGATE_BENCH_LAYERS")
        .map(|l| {
            l.parse()
                .expect("SKILLGATE_BENCH_LAYERS is a number of layers")
        })
        .unwrap_or(0);
    let rt = runtime();
    let (_dir, kernel) = kernel(layers, true);
    rt.block_on(async {
        for _ in 0..n {
            let out = kernel.invoke("noop", json!({}), InvokeOptions::default());
            black_box(out.await.expect("layered noop runs"));
        }
    });
    println!("{n} invocations under {layers} leaf layers");
}

criterion_group!(benches, invoke_noop, per_layer);

fn main() {
    // The subscriber `serve` installs, with its filter: without one, every span the kernel makes
    // would take tracing's fallback to the `log` crate, which `serve` never does.
    let _telemetry = skillgate::telemetry::init(
        skillgate::telemetry::LogFormat::Text,
        skillgate::telemetry::SERVE_FILTER,
    );
    if let Ok(n) = std::env::var("SKILLGATE_BENCH_COUNT") {
        counted(
            n.parse()
                .expect("SKILLGATE_BENCH_COUNT is a number of invocations"),
        );
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
