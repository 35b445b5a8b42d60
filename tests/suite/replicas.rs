//! `skillgate serve` processes on one store: a WebSocket subscriber resumes with no gap and no
//! duplicate after its server was killed with SIGKILL and restarted (SQLite and Postgres), and
//! an event emitted through one replica reaches a subscriber on another (Postgres); replicas
//! under load and under faults answer every request they take and handle every routed event.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::common::Project;
use crate::support::process::{Served, serve};
use crate::support::record::woken_until;
use crate::support::stores::Store;
use crate::support::ws_client::WsClient;

fn start(project: &Project, store: &Store) -> Served {
    start_with_env(project, store, &[])
}

/// `skillgate serve` on a free port over `store`, with `env` set.
fn start_with_env(project: &Project, store: &Store, env: &[(&str, &str)]) -> Served {
    let mut args = vec!["--bind", "127.0.0.1:0"];
    if let Some(url) = &store.url {
        args.extend(["--store", url.as_str()]);
    }
    serve(project.path(), &args, env)
}

async fn connect(served: &Served) -> WsClient {
    let addr = served.addr.parse().expect("an address");
    WsClient::connect(addr, None).await.0
}

/// Emits `n` on `topic` through the `event-emit` skill, over `client`.
async fn emit(client: &mut WsClient, topic: &str, n: u64) {
    let id = format!("emit-{n}");
    client
        .send(json!({ "type": "invoke", "id": id, "skill": "event-emit", "args": { "topic": topic, "data": { "n": n } } }))
        .await;
    let answer = client.answer(&id).await.pop().unwrap();
    assert_eq!(answer["type"], "result", "{answer}");
}

/// The next subscription event: its `n` and durable id (other frames are skipped).
async fn next_event(client: &mut WsClient) -> (u64, String) {
    loop {
        let frame = client.recv().await;
        if frame["type"] == "event" && frame.get("topic").is_some() {
            return (
                frame["event"]["data"]["n"].as_u64().unwrap(),
                frame["eventId"].as_str().unwrap().to_string(),
            );
        }
    }
}

async fn subscribe(client: &mut WsClient, topic: &str, from: Option<&str>) {
    let mut frame = json!({ "type": "subscribe", "topic": topic });
    if let Some(from) = from {
        frame["from"] = Value::from(from);
    }
    client.send(frame).await;
    let subscribed = client.until(|f| f["type"] == "subscribed").await;
    assert_eq!(subscribed.last().unwrap()["gap"], false);
}

async fn resume_after_sigkill(store: &Store) {
    let project = Project::new();
    let topic = "orders";
    let first = start(&project, store);
    let mut subscriber = connect(&first).await;
    subscribe(&mut subscriber, topic, None).await;
    let mut publisher = connect(&first).await;
    for n in 1..=3 {
        emit(&mut publisher, topic, n).await;
    }
    let mut last = String::new();
    for n in 1..=3 {
        let (got, id) = next_event(&mut subscriber).await;
        assert_eq!(got, n);
        last = id;
    }
    first.kill();
    let second = start(&project, store);
    // Emitted while the subscriber was away.
    let mut publisher = connect(&second).await;
    for n in 4..=5 {
        emit(&mut publisher, topic, n).await;
    }
    let mut subscriber = connect(&second).await;
    subscribe(&mut subscriber, topic, Some(&last)).await;
    emit(&mut publisher, topic, 6).await;
    for n in 4..=6 {
        assert_eq!(next_event(&mut subscriber).await.0, n);
    }
    let extra = tokio::time::timeout(Duration::from_millis(500), subscriber.next()).await;
    assert!(extra.is_err(), "no duplicate: {extra:?}");
    let (code, _) = second.stop();
    assert_eq!(code, Some(0));
}

/// Runs `test` on a runtime of its own (the Postgres store is made and dropped outside it).
fn run(test: impl std::future::Future<Output = ()>) {
    crate::support::common::runtime().block_on(test);
}

fn postgres() -> Option<Store> {
    Store::all().into_iter().find(|s| s.url.is_some())
}

#[test]
fn a_subscriber_resumes_after_its_server_was_killed_on_sqlite() {
    run(resume_after_sigkill(&Store::sqlite()));
}

#[test]
fn a_subscriber_resumes_after_its_server_was_killed_on_postgres() {
    if let Some(store) = postgres() {
        run(resume_after_sigkill(&store));
    }
}

#[test]
fn an_event_emitted_on_one_replica_reaches_a_subscriber_on_another() {
    let Some(store) = postgres() else {
        return;
    };
    run(async {
        let project = Project::new();
        let a = start(&project, &store);
        let b = start(&project, &store);
        let mut subscriber = connect(&b).await;
        subscribe(&mut subscriber, "fanout", None).await;
        let mut publisher = connect(&a).await;
        for n in 1..=3 {
            emit(&mut publisher, "fanout", n).await;
        }
        for n in 1..=3 {
            assert_eq!(next_event(&mut subscriber).await.0, n);
        }
    });
}

#[test]
fn the_same_idempotency_key_on_two_replicas_runs_once() {
    let Some(store) = postgres() else {
        return;
    };
    run(async {
        let project = Project::new();
        let a = start(&project, &store);
        let b = start(&project, &store);
        let client = crate::support::common::http_client();
        let body = json!({ "topic": "paid", "data": { "order": 7 } });
        let send = |url: String| {
            client
                .post(url)
                .header("idempotency-key", "order-7")
                .json(&body)
                .send()
        };
        let first = send(a.url("/invoke/event-emit")).await.unwrap();
        assert_eq!(first.status(), 200);
        let first: Value = first.json().await.unwrap();
        let second = send(b.url("/invoke/event-emit")).await.unwrap();
        assert_eq!(second.headers()["idempotent-replayed"], "true");
        // The same envelope: the event was emitted once, by A.
        assert_eq!(second.json::<Value>().await.unwrap(), first);
    });
}

/// A project whose webhook route `/hooks/pay` runs `paid`, which emits `paid` with the
/// delivery id; and the environment that holds the route's secret.
fn paid_project() -> (Project, [(&'static str, &'static str); 1]) {
    let project = Project::new();
    project
        .write(
            "main.skill.md",
            "---\nname: main\ndescription: Hooks.\nmetadata:\n  role: main\n  webhook:\n    routes:\n      - { path: /hooks/pay, secret: \"${env.SG_REPLICA_WEBHOOK_SECRET}\", ref: paid }\n---\nmain\n",
        )
        .skill(
            "paid.skill.js",
            "export default async function (ctx, args) {\n  await ctx.manager.invoke('event-emit', { topic: 'paid', data: { delivery: args.id } });\n  return 'ok';\n}\n",
        );
    (project, [("SG_REPLICA_WEBHOOK_SECRET", "replica-secret")])
}

#[test]
fn the_same_webhook_delivery_sent_to_two_replicas_runs_once() {
    let Some(store) = postgres() else {
        return;
    };
    run(async {
        let (project, env) = paid_project();
        let secret = env[0].1;
        let a = start_with_env(&project, &store, &env);
        let b = start_with_env(&project, &store, &env);
        // Watch what the runs emit, from the start.
        let mut watcher = connect(&a).await;
        subscribe(&mut watcher, "paid", None).await;
        let body = r#"{"order":7}"#;
        let ts = crate::webhook::routes::now();
        let signature = crate::webhook::routes::sign_standard_with(secret, "msg_pay_7", ts, body);
        let client = crate::support::common::http_client();
        let mut statuses = Vec::new();
        for served in [&a, &b] {
            let response = client
                .post(served.url("/hooks/pay"))
                .header("webhook-id", "msg_pay_7")
                .header("webhook-timestamp", ts.to_string())
                .header("webhook-signature", &signature)
                .body(body)
                .send()
                .await
                .unwrap();
            statuses.push(response.status().as_u16());
        }
        assert_eq!(statuses, [202, 200], "queued once, acknowledged once");
        let (delivery, _) = next_payment(&mut watcher).await;
        assert_eq!(delivery, "msg_pay_7");
        let extra = tokio::time::timeout(Duration::from_secs(2), next_payment(&mut watcher)).await;
        assert!(extra.is_err(), "the skill ran once: {extra:?}");
    });
}

#[test]
fn a_webhook_delivery_sent_many_times_at_once_is_queued_once_and_every_other_send_is_told_it_is_a_duplicate()
 {
    for store in Store::all() {
        run(async {
            let (project, env) = paid_project();
            let secret = env[0].1;
            // Two replicas on Postgres; one server on the embedded store.
            let replicas: Vec<Served> = (0..if store.url.is_some() { 2 } else { 1 })
                .map(|_| start_with_env(&project, &store, &env))
                .collect();
            let mut watcher = connect(&replicas[0]).await;
            subscribe(&mut watcher, "paid", None).await;
            let body = r#"{"order":8}"#;
            let ts = crate::webhook::routes::now();
            let signature =
                crate::webhook::routes::sign_standard_with(secret, "msg_pay_8", ts, body);
            let client = crate::support::common::http_client();
            // The sender's retries arrive while the first send is still being queued.
            let sends = (0..16).map(|i| {
                client
                    .post(replicas[i % replicas.len()].url("/hooks/pay"))
                    .header("webhook-id", "msg_pay_8")
                    .header("webhook-timestamp", ts.to_string())
                    .header("webhook-signature", &signature)
                    .body(body)
                    .send()
            });
            let mut answers = Vec::new();
            for response in futures::future::join_all(sends).await {
                let response = response.unwrap();
                let status = response.status().as_u16();
                answers.push((status, response.json::<Value>().await.unwrap()));
            }
            answers.sort_by_key(|(status, _)| *status);
            let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
            let mut expected = vec![200; 15];
            expected.push(202);
            assert_eq!(
                statuses,
                expected,
                "{}: queued once, every other send a duplicate (never \"being queued, try again\"): {answers:?}",
                store.name()
            );
            for (_, answer) in &answers[..15] {
                assert_eq!(
                    answer,
                    &json!({ "deliveryId": "msg_pay_8", "duplicate": true })
                );
            }
            let (delivery, _) = next_payment(&mut watcher).await;
            assert_eq!(delivery, "msg_pay_8");
            let extra =
                tokio::time::timeout(Duration::from_secs(2), next_payment(&mut watcher)).await;
            assert!(extra.is_err(), "the skill ran once: {extra:?}");
        });
    }
}

/// The next `paid` event: the delivery it was for, and its event id.
async fn next_payment(client: &mut WsClient) -> (String, String) {
    loop {
        let frame = client.recv().await;
        if frame["type"] == "event" && frame["topic"] == "paid" {
            return (
                frame["event"]["data"]["delivery"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                frame["eventId"].as_str().unwrap().to_string(),
            );
        }
    }
}

#[test]
fn a_streamed_run_started_on_one_replica_resumes_on_another() {
    use crate::support::server::SseReader;
    let Some(store) = postgres() else {
        return;
    };
    run(async {
        let project = Project::new();
        project.skill(
            "parts.skill.js",
            "export default async function (ctx) {\n  for (const i of [0, 1, 2]) {\n    await ctx.manager.invoke('gateway-send', { message: 'part ' + i });\n  }\n  return 'done';\n}\n",
        );
        let a = start(&project, &store);
        let b = start(&project, &store);
        let client = crate::support::common::http_client();
        let open = |url: String, last: Option<String>| {
            let mut request = client
                .post(url)
                .header("accept", "text/event-stream")
                .header("idempotency-key", "report-9")
                .json(&json!({}));
            if let Some(last) = last {
                request = request.header("last-event-id", last);
            }
            request.send()
        };
        let mut first = SseReader::new(open(a.url("/invoke/parts"), None).await.unwrap());
        let seen = loop {
            let frame = first.next().await.expect("a frame");
            if frame.event == "message" {
                break frame;
            }
        };
        assert_eq!(seen.data, "part 0");
        drop(first);
        let response = open(b.url("/invoke/parts"), seen.id.clone()).await.unwrap();
        assert_eq!(response.status(), 200);
        let mut rest = SseReader::new(response);
        let mut frames = Vec::new();
        while let Some(frame) = rest.next().await {
            frames.push((frame.event, frame.data));
        }
        let messages: Vec<_> = frames
            .iter()
            .filter(|(event, _)| event == "message")
            .map(|(_, data)| data.clone())
            .collect();
        assert_eq!(messages, [json!("part 1"), json!("part 2")]);
        assert_eq!(
            frames.last().unwrap(),
            &("result".to_string(), json!({ "result": "done" }))
        );
    });
}

#[test]
fn the_same_slack_event_sent_to_two_replicas_and_retried_is_answered_once() {
    use crate::support::slack_fake::{self, FakeSlack, mention, sign};
    let Some(store) = postgres() else {
        return;
    };
    run(async {
        let fake = FakeSlack::start().await;
        let project = Project::new();
        project
            .write(
                "main.skill.md",
                "---\nname: main\ndescription: Slack.\nmetadata:\n  role: main\n  slack:\n    default: answer\n    post-interval: 0.001\n---\nmain\n",
            )
            .skill(
                "answer.skill.md",
                "---\nname: answer\ndescription: Answers.\n---\nanswered\n",
            );
        let api_url = fake.api_url();
        let env = [
            ("SLACK_BOT_TOKEN", slack_fake::BOT_TOKEN),
            ("SLACK_SIGNING_SECRET", slack_fake::SIGNING_SECRET),
            ("SLACK_API_URL", api_url.as_str()),
        ];
        let a = start_with_env(&project, &store, &env);
        let b = start_with_env(&project, &store, &env);
        fake.wait_calls("auth.test", 2).await;
        let event = mention("EvRep1", "C9", "1700000030.000100", "hello");
        let body = event.to_string();
        let client = crate::support::common::http_client();
        // Slack retries (the first answer was slow), and a balancer sends them to both.
        for (n, served) in [&a, &b, &a, &b].into_iter().enumerate() {
            let mut request = client
                .post(served.url("/slack/events"))
                .header("content-type", "application/json")
                .body(body.clone());
            for (name, value) in sign(&body, slack_fake::now(), slack_fake::SIGNING_SECRET) {
                request = request.header(name, value);
            }
            if n > 0 {
                request = request.header("x-slack-retry-num", n.to_string());
            }
            assert_eq!(request.send().await.unwrap().status(), 200);
        }
        let posts = fake.answer_in("C9", "1700000030.000100").await;
        assert_eq!(posts.len(), 1);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(fake.calls("chat.postMessage").len(), 1, "one reply in all");
    });
}

/// What the clients of [`load`] saw from one replica.
#[derive(Default, Debug)]
struct Seen {
    answered: usize,
    /// Connection refused or reset: the request was never taken, or died with its replica.
    refused: usize,
    /// Any other answer: a wrong status or body. Must stay empty.
    wrong: Vec<String>,
}

/// What each replica's clients saw so far, shared with the test while [`load`] runs; `grew`
/// wakes the test at each answer.
#[derive(Default)]
struct Counts {
    seen: parking_lot::Mutex<Vec<Seen>>,
    grew: tokio::sync::Notify,
}

type Tally = Arc<Counts>;

impl Counts {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<Seen>> {
        self.seen.lock()
    }
}

/// `clients` tasks send `POST /invoke/hello` round robin to `addrs` until `stop`, counting in
/// `seen`; each answer is checked against the name it asked for.
async fn load(
    addrs: Vec<String>,
    clients: usize,
    stop: tokio_util::sync::CancellationToken,
    seen: Tally,
) {
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (addrs, tally, stop) = (addrs.clone(), seen.clone(), stop.clone());
            tokio::spawn(async move {
                let http = crate::support::common::http_client();
                let mut n = client;
                while !stop.is_cancelled() {
                    let i = n % addrs.len();
                    let name = format!("c{client}n{n}");
                    let sent = http
                        .post(format!("http://{}/invoke/hello", addrs[i]))
                        .json(&json!({ "name": name }))
                        .send()
                        .await;
                    let outcome = match sent {
                        Ok(response) => {
                            let status = response.status();
                            let body: Value = response.json().await.unwrap_or(Value::Null);
                            if status == 200 && body["result"] == format!("Hello, {name}!\n") {
                                Ok(())
                            } else {
                                Err(Some(format!("{status} {body}")))
                            }
                        }
                        Err(_) => Err(None),
                    };
                    let mut seen = tally.lock();
                    match outcome {
                        Ok(()) => seen[i].answered += 1,
                        Err(None) => seen[i].refused += 1,
                        Err(Some(wrong)) => seen[i].wrong.push(wrong),
                    }
                    drop(seen);
                    tally.grew.notify_waiters();
                    n += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Waits until `ready` holds of the tally, woken at each answer (a hang guard of 30 s: a
/// machine busy with other tests can be slow to get the first answers through).
async fn until(tally: &Tally, ready: impl Fn(&[Seen]) -> bool) {
    let wait = woken_until(&tally.grew, || ready(&tally.lock()).then_some(()));
    let _ = tokio::time::timeout(Duration::from_secs(30), wait).await;
}

#[test]
fn replicas_under_load_answer_every_request_they_take_when_one_is_killed_and_one_restarted() {
    let Some(store) = postgres() else {
        return;
    };
    run(async {
        let project = crate::support::common::hello_project();
        // The rate limit counts per client address, and every client here is 127.0.0.1.
        let unlimited = [("SKILLGATE_RATE_LIMIT", "0")];
        let replicas: Vec<Served> = (0..3)
            .map(|_| start_with_env(&project, &store, &unlimited))
            .collect();
        let addrs: Vec<String> = replicas.iter().map(|r| r.addr.clone()).collect();
        let mut replicas = replicas.into_iter();
        let (first, second, third) = (
            replicas.next().unwrap(),
            replicas.next().unwrap(),
            replicas.next().unwrap(),
        );
        let stop = tokio_util::sync::CancellationToken::new();
        let tally: Tally = Arc::new(Counts {
            seen: parking_lot::Mutex::new((0..addrs.len()).map(|_| Seen::default()).collect()),
            grew: tokio::sync::Notify::new(),
        });
        let running = tokio::spawn(load(addrs, 6, stop.clone(), tally.clone()));
        // Every replica is under load before one goes.
        until(&tally, |seen| seen.iter().all(|s| s.answered >= 5)).await;
        // SIGKILL one replica under load.
        third.kill();
        tokio::time::sleep(Duration::from_millis(500)).await;
        // A rolling restart of another: SIGTERM drains what it took, then it comes back.
        let (code, _) = first.stop();
        assert_eq!(code, Some(0), "the stopped replica drained cleanly");
        let before = tally.lock()[1].answered;
        until(&tally, |seen| seen[1].answered >= before + 5).await;
        stop.cancel();
        running.await.unwrap();
        let seen = std::mem::take(&mut *tally.lock());
        for (i, replica) in seen.iter().enumerate() {
            assert!(
                replica.wrong.is_empty(),
                "replica {i} answered wrongly: {:?}",
                &replica.wrong[..replica.wrong.len().min(5)]
            );
        }
        // The replica that stayed up answered everything sent to it.
        assert!(seen[1].answered > 0, "{seen:?}");
        assert_eq!(seen[1].refused, 0, "{seen:?}");
        assert!(seen[0].answered > 0 && seen[2].answered > 0, "{seen:?}");
        // The restarted replica serves again, on the same store.
        let again = start_with_env(&project, &store, &unlimited);
        let (_, body) = again
            .post("/invoke/hello", &json!({ "name": "back" }))
            .await;
        assert_eq!(body["result"], "Hello, back!\n");
        drop(second);
    });
}

/// A project whose main skill routes `jobs` to `on-job`, which works for about 40 ms and emits
/// `done` with the event's `n`, the replica it ran on (`REPLICA` in its environment) and when it
/// started and ended.
fn jobs_project() -> Project {
    let project = Project::new();
    project.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  $private: [role]\n  event:\n    routes:\n      - { topic: jobs, ref: on-job, args: { replica: \"${env.REPLICA}\" } }\n---\nmain\n",
    );
    project.skill(
        "on-job.skill.js",
        "export const frontmatter = { name: 'on-job' };\n\
         export default async (ctx, args) => {\n\
           const start = Date.now();\n\
           while (Date.now() < start + 40) {}\n\
           await ctx.manager.invoke('event-emit', { topic: 'done', data: { n: args.data.n, replica: args.replica, start, end: Date.now() } });\n\
           return 'ok';\n\
         };\n",
    );
    project
}

/// One handler run: which event, on which replica, from when to when (ms).
#[derive(Debug, Clone)]
struct Run {
    n: u64,
    replica: String,
    start: u64,
    end: u64,
}

/// Every `done` event in the store so far.
fn runs(project: &Project, store: &Store) -> Vec<Run> {
    let mut command = crate::support::common::skillgate_command(project.path());
    command.args([
        "--store",
        store.url.as_deref().unwrap(),
        "events",
        "replay",
        "done",
    ]);
    let out = command.output().expect("skillgate events replay");
    assert!(
        out.status.success(),
        "{}",
        crate::support::common::stderr(&out)
    );
    crate::support::common::stdout(&out)
        .lines()
        .map(|line| {
            let e: Value = serde_json::from_str(line).expect("an envelope");
            let d = &e["data"];
            Run {
                n: d["n"].as_u64().unwrap(),
                replica: d["replica"].as_str().unwrap().to_string(),
                start: d["start"].as_u64().unwrap(),
                end: d["end"].as_u64().unwrap(),
            }
        })
        .collect()
}

#[test]
fn replicas_handle_every_event_at_least_once_and_no_event_on_two_at_once_when_one_is_killed() {
    let Some(store) = postgres() else {
        return;
    };
    let project = jobs_project();
    let replicas: Vec<Served> = (0..3)
        .map(|i| {
            let name = format!("r{i}");
            start_with_env(
                &project,
                &store,
                &[
                    ("REPLICA", name.as_str()),
                    ("SKILLGATE_RATE_LIMIT", "0"),
                    // A killed replica's claimed events come back after 2 s, not 30.
                    ("SKILLGATE_VISIBILITY", "2000"),
                ],
            )
        })
        .collect();
    for replica in &replicas {
        assert!(
            replica.started.contains("1 event route(s)"),
            "{}",
            replica.started
        );
    }
    let total = 200u64;
    let addrs: Vec<String> = replicas[..2].iter().map(|r| r.addr.clone()).collect();
    let mut replicas = replicas.into_iter();
    let (first, second, third) = (
        replicas.next().unwrap(),
        replicas.next().unwrap(),
        replicas.next().unwrap(),
    );
    run(async {
        let next = Arc::new(std::sync::atomic::AtomicU64::new(1));
        let emitters: Vec<_> = (0..8)
            .map(|_| {
                let (next, addrs) = (next.clone(), addrs.clone());
                tokio::spawn(async move {
                    let http = crate::support::common::http_client();
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if n > total {
                            return;
                        }
                        let addr = &addrs[(n % 2) as usize];
                        let response = http
                            .post(format!("http://{addr}/invoke/event-emit"))
                            .json(&json!({ "topic": "jobs", "data": { "n": n } }))
                            .send()
                            .await
                            .expect("the survivors take every emit");
                        assert_eq!(response.status(), 200);
                    }
                })
            })
            .collect();
        for emitter in emitters {
            emitter.await.unwrap();
        }
        // The handlers are slower than the emitters: a backlog waits. SIGKILL a replica while
        // it holds claims and has a run in flight.
        tokio::time::sleep(Duration::from_millis(500)).await;
        third.kill();
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let runs = loop {
        let runs = runs(&project, &store);
        let handled: std::collections::HashSet<u64> = runs.iter().map(|r| r.n).collect();
        if handled.len() as u64 == total || std::time::Instant::now() > deadline {
            break runs;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let handled: std::collections::BTreeSet<u64> = runs.iter().map(|r| r.n).collect();
    let missing: Vec<u64> = (1..=total).filter(|n| !handled.contains(n)).collect();
    assert!(missing.is_empty(), "events never handled: {missing:?}");
    let on: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.replica.as_str()).collect();
    assert!(
        on.contains("r2"),
        "the killed replica had handled some first: {on:?}"
    );
    assert!(on.contains("r0") && on.contains("r1"), "{on:?}");
    let count = |name: &str| runs.iter().filter(|r| r.replica == name).count();
    eprintln!(
        "{} runs of {total} events: r0 {}, r1 {}, r2 {} (killed)",
        runs.len(),
        count("r0"),
        count("r1"),
        count("r2")
    );
    // Runs of one event never overlap: a second delivery starts only after the first ended
    // (or its replica died).
    let mut by_event: std::collections::HashMap<u64, Vec<&Run>> = Default::default();
    for r in &runs {
        by_event.entry(r.n).or_default().push(r);
    }
    for (n, list) in &by_event {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                assert!(
                    a.end <= b.start || b.end <= a.start,
                    "event {n} ran on {} and {} at once: {a:?} {b:?}",
                    a.replica,
                    b.replica
                );
            }
        }
    }
    drop((first, second));
}
