//! Limits: each stopped with its own error naming the limit and its value, then a healthy
//! sandbox.

use serde_json::json;
use skillgate::ErrorKind;

use super::{assert_healthy, js_project, kernel, run, untrusted};
use crate::support::common::{Project, Seen};

#[tokio::test]
async fn heap_exhaustion_by_array_growth_hits_the_memory_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "const a = []; for (;;) a.push({ i: a.length, s: 'x' + a.length });",
        json!({"memory": 16}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox memory limit of 16 MiB exceeded");
    assert_eq!(err.data().unwrap()["limit"], "memory");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn heap_exhaustion_by_huge_strings_hits_the_memory_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "let s = 'x'.repeat(1024); const keep = []; for (;;) { s = s + s; keep.push(s.slice(1)); }",
        json!({"memory": 16}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox memory limit of 16 MiB exceeded");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn heap_exhaustion_by_json_nesting_is_stopped_by_a_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    // Parsing text nested a million deep.
    let err = untrusted(
        &k,
        "const n = 1000000; return JSON.parse('['.repeat(n) + ']'.repeat(n));",
        json!({"memory": 16}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message() == "sandbox stack limit of 256 KiB exceeded"
            || err.message() == "sandbox memory limit of 16 MiB exceeded",
        "{err}"
    );
    assert_healthy(&k).await;
    // Building a nested value until the heap is full.
    let err = untrusted(
        &k,
        "let v = {}; for (;;) v = { v, pad: [v, v] };",
        json!({"memory": 16, "time": 20000}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox memory limit of 16 MiB exceeded");
    assert_healthy(&k).await;
    // Returning a value nested too deeply to cross the boundary.
    let err = untrusted(
        &k,
        "let v = []; for (let i = 0; i < 100000; i++) v = [v]; return v;",
        json!({}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message().starts_with("sandbox stack limit")
            || err.message().contains("cannot cross the sandbox boundary"),
        "{err}"
    );
    assert_healthy(&k).await;
}

#[tokio::test]
async fn an_infinite_loop_hits_the_time_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(&k, "for (;;) {}", json!({"time": 200}))
        .await
        .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_eq!(err.data().unwrap()["limit"], "time");
    assert_healthy(&k).await;
    // Catching the interruption does not help: it cannot be caught.
    let err = untrusted(
        &k,
        "for (;;) { try { for (;;) {} } catch (e) { /* keep going */ } }",
        json!({"time": 200}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_healthy(&k).await;
}

/// The time limit is the script's own running time: the kernel work it awaits (here a tool that
/// holds the very thread the script runs on for longer than the limit) is not counted.
#[tokio::test]
async fn time_spent_in_the_work_a_script_awaits_is_not_counted_against_its_time_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let out = untrusted(
        &k,
        "await ctx.manager.invoke('busy', { ms: 400 }); await ctx.manager.invoke('busy', { ms: 400 }); return 'done';",
        json!({"time": 200, "wall": 60000}),
    )
    .await;
    assert_eq!(
        out.expect("the script's own time is short"),
        Some(json!("done"))
    );
}

#[tokio::test]
async fn an_endless_microtask_chain_hits_the_time_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(&k, "for (;;) await null;", json!({"time": 200}))
        .await
        .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_healthy(&k).await;
    let err = untrusted(
        &k,
        "const spin = () => Promise.resolve().then(spin); spin(); await new Promise(() => {});",
        json!({"time": 200, "wall": 60000}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 200 ms exceeded");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn a_promise_that_never_settles_hits_the_wall_clock_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(&k, "await new Promise(() => {});", json!({"wall": 300}))
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("sandbox wall-clock limit of 300 ms exceeded"),
        "{err}"
    );
    assert_eq!(err.data().unwrap()["limit"], "wall");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn deeply_nested_source_hits_the_stack_limit_while_parsing() {
    let k = kernel(&Project::new(), None, Seen::default());
    let depth = 200_000;
    let code = format!("return {}1{};", "(".repeat(depth), ")".repeat(depth));
    let err = untrusted(&k, &code, json!({})).await.unwrap_err();
    assert_eq!(err.message(), "sandbox stack limit of 256 KiB exceeded");
    assert_healthy(&k).await;
    // The same source nested in `eval` at run time.
    let err = untrusted(
        &k,
        "return eval('['.repeat(200000) + ']'.repeat(200000));",
        json!({}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox stack limit of 256 KiB exceeded");
    assert_healthy(&k).await;
    // And in a `.skill.js` file: a load failure that says so.
    let p = js_project(&[(
        "deep.skill.js",
        &format!(
            "export default () => {}1{};",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    )]);
    let k2 = kernel(&p, None, Seen::default());
    let err = run(&k2, "deep", json!({})).await.unwrap_err();
    assert!(err.message().contains("nested too deeply"), "{err}");
    assert_healthy(&k2).await;
}

#[tokio::test]
async fn deep_recursion_hits_the_stack_limit() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "const f = (n) => f(n + 1) + 1; return f(0);",
        json!({"stack": 128}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.message(), "sandbox stack limit of 128 KiB exceeded");
    assert_eq!(err.data().unwrap()["limit"], "stack");
    assert_healthy(&k).await;
}

#[tokio::test]
async fn aborting_the_context_stops_a_parked_script() {
    let k = kernel(&Project::new(), None, Seen::default());
    let err = untrusted(
        &k,
        "ctx.manager.abort('enough'); await new Promise(() => {});",
        json!({"wall": 60000}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Aborted, "{err}");
    assert!(err.message().contains("enough"), "{err}");
    assert_healthy(&k).await;
}
