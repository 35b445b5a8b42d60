//! Streams and queues under a flood: a run's log and event parts the client reads too slowly
//! for are counted and told (`gap`), never dropped silently; the sandbox queue and the runs at
//! once are bounded, and a call past either is refused as busy (503 with `Retry-After`) instead
//! of waiting without end. A burst of other runs' events costs a stream none of its parts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::InvokeOptions;
use tokio::sync::Notify;

use crate::support::common::Project;
use crate::support::server::{SseReader, TestServer, config, problem};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_a_slow_stream_reader_missed_are_counted_in_a_gap_before_the_result() {
    // The client starts reading only once the skill has emitted every event, so the stream has
    // had to hold or count all of them whatever the machine's load (no race with a sleep).
    let produced = 3000u64;
    let done = Arc::new(Notify::new());
    let server =
        TestServer::start_with(Project::new(), config(), |b| b.native(chatty(done.clone()))).await;
    let response = server
        .client
        .post(server.url("/invoke/chatty"))
        .header("accept", "text/event-stream")
        .json(&json!({ "n": produced }))
        .send()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), done.notified())
        .await
        .expect("the skill emits its events");
    let mut stream = SseReader::new(response);
    let (mut events, mut missed, mut result) = (0u64, 0u64, None);
    while let Some(frame) = stream.next().await {
        match frame.event.as_str() {
            "event" => events += 1,
            "gap" => missed += frame.data["missed"].as_u64().unwrap(),
            "result" => {
                result = Some(frame.data.clone());
                break;
            }
            _ => {}
        }
    }
    assert_eq!(result, Some(json!({ "result": "done" })));
    assert!(
        events + missed >= produced,
        "{events} events and {missed} told missing of {produced}"
    );
    assert!(events < produced, "the reader was slow: some were left out");
}

/// `chatty`: emits `args.n` events of 4 KB on `chatter`, tells `done`, and answers `done`.
fn chatty(done: Arc<Notify>) -> skillgate::skills::tool::Tool {
    crate::support::common::native(
        "name: chatty\ndescription: Emits many events.\n",
        move |ctx: skillgate::Context, args: Arc<Value>| {
            let done = done.clone();
            async move {
                let pad = "x".repeat(4096);
                for n in 0..args["n"].as_u64().unwrap() {
                    let event = json!({ "topic": "chatter", "data": { "n": n, "pad": pad } });
                    ctx.invoke("event-emit", event, InvokeOptions::default())
                        .await?;
                }
                done.notify_one();
                Ok(Some(json!("done")))
            }
        },
    )
}

/// `n` calls of `path` with `body` at once: how many answered 200, and the ones refused 503
/// (anything else fails the test).
async fn at_once(
    server: &TestServer,
    path: &str,
    body: Value,
    n: usize,
) -> (usize, Vec<reqwest::Response>) {
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let (client, url, body) = (server.client.clone(), server.url(path), body.clone());
            tokio::spawn(async move { client.post(url).json(&body).send().await.unwrap() })
        })
        .collect();
    let (mut ok, mut busy) = (0, Vec::new());
    for call in calls {
        let response = call.await.unwrap();
        match response.status().as_u16() {
            200 => ok += 1,
            503 => busy.push(response),
            other => panic!("unexpected {other}"),
        }
    }
    (ok, busy)
}

/// `slow`: answers after 400 ms.
fn slow() -> skillgate::skills::tool::Tool {
    crate::support::common::native(
        "name: slow\ndescription: Takes a moment.\n",
        |_ctx: skillgate::Context, _args| async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok(Some(json!("ok")))
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_call_past_the_sandbox_queue_is_refused_503_with_retry_after() {
    skillgate::sandbox::set_queue_limit(2);
    let project = Project::new();
    project.skill(
        "spin.skill.js",
        "/*---\nname: spin\ndescription: Keeps a sandbox thread busy a moment.\n---*/\n\
         export default async function () { const end = Date.now() + 400; while (Date.now() < end) {} return 'ok'; }\n",
    );
    let server = TestServer::start(project, config()).await;
    let (ok, mut busy) = at_once(&server, "/invoke/spin", json!({}), 12).await;
    assert!(ok >= 1, "the calls the queue had room for ran");
    let refused = busy.pop().expect("calls past the queue are refused");
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = problem(refused, 503).await;
    assert!(
        body["detail"].as_str().unwrap().contains("sandbox is busy"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_past_max_runs_are_refused_503_with_retry_after_and_room_comes_back() {
    let mut settings = config();
    settings.max_runs = 2;
    let server = TestServer::start_with(Project::new(), settings, |b| b.native(slow())).await;
    let (ok, mut busy) = at_once(&server, "/invoke/slow", json!({}), 6).await;
    assert_eq!(ok, 2, "two runs at once");
    let refused = busy.pop().expect("runs past the bound are refused");
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = problem(refused, 503).await;
    assert!(
        body["detail"].as_str().unwrap().contains("--max-runs"),
        "{body}"
    );
    // Finished runs make room.
    let again = server.post_json("/invoke/slow", &json!({})).await;
    assert_eq!(again.status(), 200);
}

/// A run turned away because the server is full is still in the runs record, as refused with
/// the busy problem and the args it came with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_refused_as_busy_is_recorded_as_refused_with_its_args() {
    use skillgate::events::KernelBus;
    let mut settings = config();
    settings.max_runs = 1;
    let server = TestServer::start_with(Project::new(), settings, |b| b.native(slow())).await;
    let (ok, busy) = at_once(&server, "/invoke/slow", json!({ "who": "ada" }), 4).await;
    assert_eq!(ok, 1, "one run at once");
    let refused = busy.len() as u64;
    assert!(refused >= 1, "the others are refused");
    let runs = server.kernel.bus().runs();
    tokio::time::timeout(Duration::from_secs(30), runs.settled_at_least(1 + refused))
        .await
        .expect("every run is recorded");
    let page: Value = server
        .get("/runs?status=refused")
        .await
        .json()
        .await
        .unwrap();
    let listed = page["runs"].as_array().unwrap();
    assert_eq!(listed.len() as u64, refused, "{page}");
    assert_eq!(listed[0]["problem"], "/docs#problem-unavailable", "{page}");
    let whole: Value = server
        .get(&format!("/runs/{}", listed[0]["id"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["args"], json!({ "who": "ada" }), "{whole}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_whose_args_pass_the_bytes_in_flight_are_refused_as_busy() {
    let mut settings = config();
    settings.max_args_in_flight = 1024 * 1024;
    let server = TestServer::start_with(Project::new(), settings, |b| b.native(slow())).await;
    // Each 600 KB: two do not fit in 1 MiB together, though each is under the body limit.
    let payload = "x".repeat(600 * 1024);
    let (ok, mut busy) = at_once(&server, "/invoke/slow", json!({ "p": payload }), 3).await;
    assert!(ok >= 1, "a run that fits runs");
    let body = problem(
        busy.pop().expect("the ones past the bound are refused"),
        503,
    )
    .await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("--max-args-in-flight"),
        "{body}"
    );
    // Small args still fit beside nothing.
    let again = server.post_json("/invoke/slow", &json!({})).await;
    assert_eq!(again.status(), 200);
}

/// A burst of events from elsewhere in the process (more than any shared feed holds) reaches no
/// stream it is not part of, and costs a streamed run none of its own parts: its stream carries
/// its event and its log with no gap. (Single-threaded, so the burst is emitted while the
/// stream's run cannot read.)
#[tokio::test]
async fn a_burst_of_other_runs_events_costs_a_streamed_run_none_of_its_parts() {
    use crate::support::common::{event, native};
    use skillgate::events::KernelBus;
    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let mine = {
        let (started, go) = (started.clone(), go.clone());
        native(
            "name: mine\ndescription: Waits, then logs and emits its own event.\n",
            move |ctx: skillgate::Context, _| {
                let (started, go) = (started.clone(), go.clone());
                async move {
                    started.notify_one();
                    go.notified().await;
                    ctx.log("my log")?;
                    ctx.invoke(
                        "event-emit",
                        json!({ "topic": "mine", "data": { "own": true } }),
                        Default::default(),
                    )
                    .await?;
                    Ok(Some(json!("done")))
                }
            },
        )
    };
    let server = TestServer::start_with(Project::new(), config(), |b| b.native(mine)).await;
    let mut stream = server.stream("/invoke/mine", &json!({})).await;
    started.notified().await;
    let burst: Vec<_> = (0..3000).map(|n| event("elsewhere", n)).collect();
    server.kernel.bus().emit_many(&burst).await.unwrap();
    go.notify_one();
    let mut seen = Vec::new();
    while let Some(frame) = stream.next().await {
        let done = frame.event == "result";
        seen.push((frame.event, frame.data));
        if done {
            break;
        }
    }
    let kinds: Vec<&str> = seen.iter().map(|(kind, _)| kind.as_str()).collect();
    assert!(
        !kinds.contains(&"gap"),
        "nothing of the run was lost: {kinds:?}"
    );
    let events: Vec<&Value> = seen
        .iter()
        .filter(|(k, _)| k == "event")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(events.len(), 1, "only the run's own event: {events:?}");
    assert_eq!(events[0]["topic"], "mine");
    assert!(
        seen.iter()
            .any(|(k, d)| k == "log" && d["text"] == "my log"),
        "{seen:?}"
    );
    assert_eq!(seen.last().unwrap().1, json!({ "result": "done" }));
}
