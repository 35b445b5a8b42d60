//! A streamed `POST /invoke` sent with an `Idempotency-Key` is recorded: the run goes on when
//! its client drops, the same request with `Last-Event-ID` continues after that frame with no
//! gap and no duplicate, and without it replays every frame; the skill runs once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use skillgate::Context;
use tokio::sync::Semaphore;

use crate::support::common::{Project, native};
use crate::support::server::{Sse, SseReader, TestServer, config, problem};

/// `steps` sends `part 0`, then takes a permit of `go` before each of `part 1` and `part 2`,
/// and answers how many times it ran.
async fn start() -> (TestServer, Arc<Semaphore>, Arc<AtomicU64>) {
    let go = Arc::new(Semaphore::new(0));
    let runs = Arc::new(AtomicU64::new(0));
    let (gate, counted) = (go.clone(), runs.clone());
    let tool = native(
        "name: steps\ndescription: Streams in steps.\n",
        move |ctx: Context, _| {
            let (gate, counted) = (gate.clone(), counted.clone());
            async move {
                let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
                for i in 0..3 {
                    if i > 0 {
                        gate.acquire().await.expect("open").forget();
                    }
                    ctx.invoke(
                        "gateway-send",
                        json!({ "message": format!("part {i}") }),
                        Default::default(),
                    )
                    .await?;
                }
                Ok(Some(json!({ "run": run })))
            }
        },
    );
    let server = TestServer::start_with(Project::new(), config(), |b| b.native(tool)).await;
    (server, go, runs)
}

async fn stream(server: &TestServer, key: Option<&str>, last: Option<&str>) -> reqwest::Response {
    let mut request = server
        .client
        .post(server.url("/invoke/steps"))
        .header("accept", "text/event-stream")
        .json(&json!({}));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    if let Some(last) = last {
        request = request.header("last-event-id", last);
    }
    request.send().await.unwrap()
}

async fn open(server: &TestServer, key: &str, last: Option<&str>) -> SseReader {
    let response = stream(server, Some(key), last).await;
    assert_eq!(response.status(), 200);
    SseReader::new(response)
}

/// Frames up to and including the first `message` (or the end).
async fn until_message(reader: &mut SseReader) -> Vec<Sse> {
    let mut frames = Vec::new();
    while let Some(frame) = reader.next().await {
        let message = frame.event == "message";
        frames.push(frame);
        if message {
            break;
        }
    }
    frames
}

async fn rest(reader: &mut SseReader) -> Vec<Sse> {
    let mut frames = Vec::new();
    while let Some(frame) = reader.next().await {
        frames.push(frame);
    }
    frames
}

fn messages(frames: &[Sse]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f.event == "message")
        .map(|f| f.data.as_str().unwrap().to_string())
        .collect()
}

fn ids(frames: &[Sse]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f.id.clone().expect("every frame has an id"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_stream_goes_on_without_its_client_and_resumes_after_last_event_id() {
    let (server, go, runs) = start().await;
    let mut first = open(&server, "job-1", None).await;
    let seen = until_message(&mut first).await;
    assert_eq!(messages(&seen), ["part 0"]);
    let last = seen.last().unwrap().id.clone().unwrap();
    drop(first);
    // With nobody reading, the run still goes on to its next part.
    go.add_permits(1);
    let mut resumed = open(&server, "job-1", Some(&last)).await;
    let mut after = until_message(&mut resumed).await;
    assert_eq!(messages(&after), ["part 1"]);
    go.add_permits(1);
    after.extend(rest(&mut resumed).await);
    assert_eq!(messages(&after), ["part 1", "part 2"]);
    let end = after.last().unwrap();
    assert_eq!(end.event, "result");
    assert_eq!(end.data, json!({ "result": { "run": 1 } }));
    // No frame twice across the two connections.
    let mut all = ids(&seen);
    all.extend(ids(&after));
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "{all:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the skill ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_keyed_stream_without_last_event_id_replays_every_frame_and_runs_once() {
    let (server, go, runs) = start().await;
    let mut first = open(&server, "job-2", None).await;
    let mut original = until_message(&mut first).await;
    go.add_permits(1);
    original.extend(until_message(&mut first).await);
    go.add_permits(1);
    original.extend(rest(&mut first).await);
    assert_eq!(original.last().unwrap().event, "result");
    let replayed = rest(&mut open(&server, "job-2", None).await).await;
    let shape = |frames: &[Sse]| -> Vec<(String, Option<String>, Value)> {
        frames
            .iter()
            .map(|f| (f.event.clone(), f.id.clone(), f.data.clone()))
            .collect()
    };
    assert_eq!(shape(&replayed), shape(&original));
    // Resuming after the last frame: the stream ends with nothing more.
    let end = original.last().unwrap().id.clone().unwrap();
    let after_end = rest(&mut open(&server, "job-2", Some(&end)).await).await;
    assert!(after_end.is_empty(), "{after_end:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_without_an_idempotency_key_is_refused() {
    let (server, _, runs) = start().await;
    let body = problem(stream(&server, None, Some("abc")).await, 400).await;
    assert!(
        body["detail"].as_str().unwrap().contains("Idempotency-Key"),
        "{body}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_got_a_json_answer_is_refused_for_a_stream() {
    let (server, go, _) = start().await;
    // Both steps may go: the JSON request runs to its end.
    go.add_permits(2);
    let json_first = tokio::spawn({
        let client = server.client.clone();
        let url = server.url("/invoke/steps");
        async move {
            client
                .post(url)
                .header("idempotency-key", "job-3")
                .json(&json!({}))
                .send()
                .await
                .unwrap()
        }
    });
    assert_eq!(json_first.await.unwrap().status(), 200);
    let body = problem(stream(&server, Some("job-3"), None).await, 422).await;
    assert_eq!(body["type"], "/docs#problem-idempotency-key-reused");
}
