//! Sessions: a sandbox kept across calls, its memory, and how it recovers.

use serde_json::json;
use skillgate::sandbox::Session;

use super::{assert_healthy, kernel, untrusted};
use crate::support::common::{Project, Seen};

#[tokio::test]
async fn a_session_keeps_its_memory_global_across_calls_seeded_from_json() {
    let session = Session::seeded(&json!({"count": 10, "name": "s"})).unwrap();
    let k = kernel(&Project::new(), Some(session.clone()), Seen::default());
    let code = "memory.count = (memory.count ?? 0) + 1; memory.fns ??= []; memory.fns.push(() => memory.count); return memory.count;";
    assert_eq!(
        untrusted(&k, code, json!({})).await.unwrap(),
        Some(json!(11))
    );
    assert_eq!(
        untrusted(&k, code, json!({})).await.unwrap(),
        Some(json!(12))
    );
    let out = untrusted(
        &k,
        "return { name: memory.name, closures: memory.fns.map((f) => f()) };",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(out, Some(json!({"name": "s", "closures": [12, 12]})));
    // A fresh sandbox has an empty memory.
    let fresh = kernel(&Project::new(), None, Seen::default());
    assert_eq!(
        untrusted(&fresh, "return Object.keys(memory).length;", json!({}))
            .await
            .unwrap(),
        Some(json!(0))
    );
}

#[tokio::test]
async fn a_session_survives_a_limit_hit_and_a_ctx_kept_from_an_ended_call_is_dead() {
    let session = Session::default();
    let k = kernel(&Project::new(), Some(session), Seen::default());
    untrusted(&k, "memory.old = ctx; memory.kept = 'yes';", json!({}))
        .await
        .unwrap();
    let err = untrusted(&k, "for (;;) {}", json!({"time": 100}))
        .await
        .unwrap_err();
    assert_eq!(err.message(), "sandbox time limit of 100 ms exceeded");
    let out = untrusted(
        &k,
        "try { await memory.old.manager.invoke('noop'); return 'acted'; } catch (e) { return memory.kept + ': ' + e.message; }",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        Some(json!(
            "yes: this ctx belongs to a sandbox call that has ended"
        ))
    );
}

#[tokio::test]
async fn a_session_holds_no_more_memory_after_many_calls_than_after_one() {
    // Each call sets up the script's `ctx` again in the session's one context: what a call
    // loads for that must not stay behind. 2,000 calls in a 2 MiB heap fail if each keeps even
    // one KiB.
    let k = kernel(&Project::new(), Some(Session::default()), Seen::default());
    let limits = json!({"memory": "2MiB"});
    for n in 0..2000 {
        let out = untrusted(
            &k,
            "return await ctx.manager.invoke('noop');",
            limits.clone(),
        )
        .await
        .unwrap_or_else(|e| panic!("call {n}: {e}"));
        assert_eq!(out, Some(json!(true)), "call {n}");
    }
}

#[tokio::test]
async fn a_session_refuses_a_second_call_while_one_runs() {
    let session = Session::default();
    let k = kernel(&Project::new(), Some(session), Seen::default());
    // The code reaches its own session again through `run-code`.
    let out = untrusted(
        &k,
        "try { await ctx.manager.invoke('run-code', { code: 'return 1;' }); return 'nested ran'; } catch (e) { return e.message; }",
        json!({}),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        out.as_str().unwrap().contains("already running a call"),
        "{out}"
    );
    assert_healthy(&k).await;
}

#[test]
fn a_session_memory_seed_must_be_an_object() {
    assert!(Session::seeded(&json!([1])).is_err());
    assert!(Session::seeded(&json!(null)).is_ok());
}

#[tokio::test]
async fn a_session_is_reset_when_a_stopped_call_left_work_queued() {
    let session = Session::seeded(&json!({"turn": 0})).unwrap();
    let k = kernel(&Project::new(), Some(session), Seen::default());
    untrusted(&k, "memory.turn = 1;", json!({})).await.unwrap();
    let err = untrusted(
        &k,
        "ctx.manager.invoke('hang'); for (;;) {}",
        json!({"time": 100}),
    )
    .await
    .unwrap_err();
    assert!(
        err.message()
            .starts_with("sandbox time limit of 100 ms exceeded; the session's sandbox was reset"),
        "{err}"
    );
    assert_eq!(err.data().unwrap()["limit"], "time");
    let out = untrusted(&k, "return memory.turn;", json!({}))
        .await
        .unwrap();
    assert_eq!(out, Some(json!(0)), "memory starts again from its seed");
}
