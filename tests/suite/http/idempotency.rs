//! `Idempotency-Key` on `POST /invoke/{skill}`: one run per key, the first answer replayed,
//! another request with the same key refused, a key still running answered 409.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use skillgate::Context;
use tokio::sync::Notify;

use crate::support::common::{Project, native};
use crate::support::server::{TestServer, config, problem};

/// `count` answers how many times it ran; `held` says when it started and answers
/// once released.
async fn start() -> (TestServer, Arc<AtomicU64>, Arc<Notify>) {
    let (server, runs, release, _) = start_with_signal().await;
    (server, runs, release)
}

async fn start_with_signal() -> (TestServer, Arc<AtomicU64>, Arc<Notify>, Arc<Notify>) {
    let runs = Arc::new(AtomicU64::new(0));
    let release = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let (counted, released, starting) = (runs.clone(), release.clone(), started.clone());
    let project = Project::new();
    project.skill(
        "strict.skill.md",
        "---\nname: strict\ndescription: Needs a name.\nmetadata:\n  params:\n    type: object\n    properties:\n      name: { type: string }\n    required: [name]\n---\nhi\n",
    );
    let server = TestServer::start_with(project, config(), move |b| {
        b.native(native(
            "name: count\ndescription: Counts its runs.\n",
            move |_ctx: Context, _| {
                let counted = counted.clone();
                async move { Ok(Some(json!(counted.fetch_add(1, Ordering::SeqCst) + 1))) }
            },
        ))
        .native(native(
            "name: held\ndescription: Waits.\n",
            move |_ctx: Context, _| {
                let (released, starting) = (released.clone(), starting.clone());
                async move {
                    starting.notify_one();
                    released.notified().await;
                    Ok(Some(json!("released")))
                }
            },
        ))
    })
    .await;
    (server, runs, release, started)
}

async fn post(server: &TestServer, skill: &str, key: &str, body: Value) -> reqwest::Response {
    server
        .client
        .post(server.url(&format!("/invoke/{skill}")))
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_runs_once_and_replays_the_first_answer() {
    let (server, runs, _) = start().await;
    let first = post(&server, "count", "k-1", json!({ "a": 1 })).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let again = post(&server, "count", "k-1", json!({ "a": 1 })).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the skill ran once");
    // Another key is another request.
    let other: Value = post(&server, "count", "k-2", json!({ "a": 1 }))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(other["result"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_another_body_or_skill_is_422() {
    let (server, runs, _) = start().await;
    assert_eq!(
        post(&server, "count", "k", json!({ "a": 1 }))
            .await
            .status(),
        200
    );
    let body = problem(post(&server, "count", "k", json!({ "a": 2 })).await, 422).await;
    assert_eq!(body["type"], "/docs#problem-idempotency-key-reused");
    let body = problem(post(&server, "held", "k", json!({ "a": 1 })).await, 422).await;
    assert_eq!(body["type"], "/docs#problem-idempotency-key-reused");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_first_request_still_runs_is_409_and_then_replays() {
    let (server, _, release, started) = start_with_signal().await;
    let url = server.url("/invoke/held");
    let client = server.client.clone();
    let first = tokio::spawn(async move {
        client
            .post(url)
            .header("idempotency-key", "slow")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
    });
    // Once the first request's run started, it holds the key.
    tokio::time::timeout(std::time::Duration::from_secs(20), started.notified())
        .await
        .expect("the first run started");
    let body = problem(post(&server, "held", "slow", json!({})).await, 409).await;
    assert_eq!(body["type"], "/docs#problem-in-progress");
    release.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first.status(), 200);
    let replay = post(&server, "held", "slow", json!({})).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_replayed_as_refused() {
    let (server, _, _) = start().await;
    let first = problem(post(&server, "strict", "bad", json!({})).await, 422).await;
    let again = post(&server, "strict", "bad", json!({})).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again = problem(again, 422).await;
    assert_eq!(again, first);
}
