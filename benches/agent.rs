//! The agent loop's own cost: a fake OpenAI-compatible server in the same process answers at
//! once (a streamed tool call running `await ctx.manager.invoke('noop')` until a run has made
//! `TURNS` of them, then a text answer), so what is measured is everything skillgate does per
//! turn: the hook and invoke callbacks through the kernel, the sandbox session running the
//! code, the nested invocation, the request built and the stream parsed, over real loopback
//! HTTP. Then `CONCURRENT` runs at once: turns per second and the process's peak RSS.
//!
//! Run: `cargo bench --bench agent` (release). `SKILLGATE_BENCH_RUNS` (default 50),
//! `SKILLGATE_BENCH_TURNS` (default 20) and `SKILLGATE_BENCH_CONCURRENT` (default 100).

mod common;

use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use serde_json::{Value, json};
use skillgate::InvokeOptions;
use skillgate::middleware::native;

use common::{env_or, runtime};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The stream of a tool call running the no-op skill.
fn tool_call_stream(turn: usize) -> String {
    let code = json!({ "code": "return await ctx.manager.invoke('noop');" }).to_string();
    let chunks = [
        json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
            { "index": 0, "id": format!("c{turn}"), "type": "function", "function": { "name": "invoke", "arguments": code } }
        ] } }] }),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
        json!({ "choices": [], "usage": { "prompt_tokens": 100, "completion_tokens": 10 } }),
    ];
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

fn text_stream() -> String {
    let chunks = [
        json!({ "choices": [{ "index": 0, "delta": { "content": "done" } }] }),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
    ];
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

/// Answers from the request alone: a tool call until the conversation holds `turns` results.
async fn fake(turns: usize) -> String {
    let app = Router::new().fallback(move |body: axum::body::Bytes| async move {
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let done = request["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        let text = if done < turns {
            tool_call_stream(done)
        } else {
            text_stream()
        };
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from(text))
            .unwrap()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let runs = env_or("SKILLGATE_BENCH_RUNS", 50) as usize;
    let turns = env_or("SKILLGATE_BENCH_TURNS", 20) as usize;
    let concurrent = env_or("SKILLGATE_BENCH_CONCURRENT", 100) as usize;
    let rt = runtime();
    rt.block_on(async move {
        let base = fake(turns).await;
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join("skills")).unwrap();
        let noop = native("name: noop\ndescription: Does nothing.\n", |_ctx, _args| async {
            Ok(None)
        });
        let kernel = skillgate::builtins::builder(project.path())
            .native(noop)
            .build();
        let args = json!({
            "prompt": "Benchmark.",
            "config": { "model": "openai/bench", "base-url": base, "max-turns": turns + 5, "max-steps": turns + 5 },
            "allowedTools": "noop",
        });
        let one = |kernel: skillgate::Kernel, args: Value| async move {
            let out = kernel
                .invoke("agent", args, InvokeOptions::default())
                .await
                .expect("agent run");
            assert_eq!(out.as_deref(), Some(&json!("done")));
        };
        // Warm up: connections, the sandbox threads, the caches.
        for _ in 0..3 {
            one(kernel.clone(), args.clone()).await;
        }
        let rss_before = peak_rss_kib();

        let started = Instant::now();
        for _ in 0..runs {
            one(kernel.clone(), args.clone()).await;
        }
        let elapsed = started.elapsed();
        // Each run makes `turns + 1` model calls (the last one answers in text).
        let model_turns = runs * (turns + 1);
        let ms_a_turn = elapsed.as_secs_f64() * 1000.0 / model_turns as f64;
        let turns_per_s = model_turns as f64 / elapsed.as_secs_f64();
        println!(
            "sequential: {runs} runs x {} turns ({turns} with a tool call): {ms_a_turn:.3} ms a turn, {turns_per_s:.0} turns/s",
            turns + 1,
        );
        common::report::record(
            "agent",
            "one run at a time",
            json!({ "ms_a_turn": ms_a_turn, "turns_per_s": turns_per_s }),
        );

        let started = Instant::now();
        let tasks: Vec<_> = (0..concurrent)
            .map(|_| tokio::spawn(one(kernel.clone(), args.clone())))
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let elapsed = started.elapsed();
        let model_turns = concurrent * (turns + 1);
        let turns_per_s = model_turns as f64 / elapsed.as_secs_f64();
        let peak = peak_rss_kib();
        println!(
            "{concurrent} runs at once: {turns_per_s:.0} turns/s, {:.2} s in all; peak RSS {} MiB (before: {} MiB)",
            elapsed.as_secs_f64(),
            peak / 1024,
            rss_before / 1024
        );
        common::report::record(
            "agent",
            "runs at once",
            json!({
                "runs": concurrent,
                "turns_per_s": turns_per_s,
                "peak_rss_mib": peak as f64 / 1024.0,
                "rss_before_mib": rss_before as f64 / 1024.0,
            }),
        );
    });
}
