//! `/ws` over a real socket with a tokio-tungstenite client: every frame of the protocol,
//! authentication by header or frame, bad frames, the size, idle, lag, origin and connection
//! limits, and topic subscriptions (resume after a reconnect; consumer groups with ack/nack).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::events::KernelBus;
use skillgate::gateway::http::HttpConfig;
use skillgate::gateway::ws::WsConfig;
use skillgate::{Context, SkillError};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;

use crate::support::common::{Project, event, native};
use crate::support::server::{TestServer, config, with_keys};
use crate::support::ws_client::{WsClient, request};

/// `hello` (a template), `talk` (logs, sends two messages, answers), `held` (answers once
/// released), `echo` (answers with what the client sends it next), `request` (answers its
/// `nonlocals.request`).
async fn start(settings: HttpConfig) -> (TestServer, Arc<Notify>) {
    let project = Project::new();
    project.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\n---\nHello, :arg[name]!\n",
    );
    let release = Arc::new(Notify::new());
    let released = release.clone();
    let released_holding = release.clone();
    let server = TestServer::start_with(project, settings, move |b| {
        b.native(native(
            "name: talk\ndescription: Talks.\n",
            |ctx: Context, _| async move {
                ctx.log(json!({ "type": "note", "text": "thinking" }))?;
                for n in 1..=2 {
                    ctx.invoke("gateway-send", json!({ "message": n }), Default::default())
                        .await?;
                }
                Ok(Some(json!("done")))
            },
        ))
        .native(native(
            "name: held\ndescription: Waits.\n",
            move |_ctx: Context, _| {
                let released = released.clone();
                async move {
                    released.notified().await;
                    Ok(Some(json!("released")))
                }
            },
        ))
        .native(native(
            "name: holding\ndescription: Says it holds, then waits.\n",
            move |ctx: Context, _| {
                let released = released_holding.clone();
                async move {
                    ctx.log(json!({ "type": "note", "text": "holding" }))?;
                    released.notified().await;
                    Ok(Some(json!("released")))
                }
            },
        ))
        .native(native(
            "name: echo\ndescription: Echoes the next message.\n",
            |ctx: Context, _| async move {
                let got = ctx
                    .invoke(
                        "gateway-receive",
                        json!({ "timeout": 20000 }),
                        Default::default(),
                    )
                    .await?;
                Ok(got.map(|v| json!({ "heard": v["message"] })))
            },
        ))
        .native(native(
            "name: request\ndescription: Answers the request it was invoked by.\n",
            |ctx: Context, _| async move { ctx.get("nonlocals.request") },
        ))
        .native(native(
            "name: broken\ndescription: Fails.\n",
            |_ctx: Context, _| async move { Err(SkillError::failed("secret detail")) },
        ))
    })
    .await;
    (server, release)
}

fn ws(config: WsConfig) -> HttpConfig {
    HttpConfig {
        websocket: config,
        ..crate::support::server::config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invocations_stream_their_frames_and_answer_by_id_several_at_once() {
    let (server, release) = start(config()).await;
    let (mut client, welcome) = WsClient::connect(server.addr, None).await;
    assert_eq!(welcome["authenticated"], true);
    assert!(
        welcome["connection"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
    );
    client.send(json!({ "type": "ping" })).await;
    assert_eq!(client.recv().await, json!({ "type": "pong" }));

    // `talk`: a log frame, two message frames, then the result, all with its id.
    client
        .send(json!({ "type": "invoke", "id": "t", "skill": "talk" }))
        .await;
    let frames = client.answer("t").await;
    let kinds: Vec<&str> = frames.iter().filter_map(|f| f["type"].as_str()).collect();
    assert!(kinds.contains(&"log"), "{frames:?}");
    let messages: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "message")
        .map(|f| &f["message"])
        .collect();
    assert_eq!(messages, [&json!(1), &json!(2)]);
    assert_eq!(frames.last().unwrap()["value"], "done");

    // Two at once: `held` waits while `hello` answers; then `held` answers once released.
    client
        .send(json!({ "type": "invoke", "id": "slow", "skill": "held" }))
        .await;
    client
        .send(
            json!({ "type": "invoke", "id": "fast", "skill": "hello", "args": { "name": "Ada" } }),
        )
        .await;
    let fast = client.answer("fast").await;
    assert_eq!(fast.last().unwrap()["value"], "Hello, Ada!\n");
    release.notify_one();
    let slow = client.answer("slow").await;
    assert_eq!(slow.last().unwrap()["value"], "released");

    // An id still running may not be reused.
    client
        .send(json!({ "type": "invoke", "id": "w", "skill": "held" }))
        .await;
    client
        .send(json!({ "type": "invoke", "id": "w", "skill": "hello", "args": { "name": "x" } }))
        .await;
    let reused = client
        .until(|f| f["type"] == "error" && f["id"] == "w")
        .await
        .pop()
        .unwrap();
    assert!(
        reused["problem"]["detail"]
            .as_str()
            .unwrap()
            .contains("still running"),
        "{reused}"
    );
    release.notify_one();
    assert_eq!(
        client.answer("w").await.last().unwrap()["value"],
        "released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_from_a_socket_sees_its_request_the_socket_and_its_headers_in_order() {
    let (mut server, _release) = start(config()).await;
    let (mut client, welcome) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "invoke", "id": "r", "skill": "request" }))
        .await;
    let frames = client.answer("r").await;
    let Value::Object(request) = &frames.last().unwrap()["value"] else {
        panic!("the request is an object: {frames:?}");
    };
    assert_eq!(
        request.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "transport",
            "method",
            "path",
            "connection",
            "remote",
            "headers",
            "id"
        ]
    );
    assert_eq!(request["transport"], "websocket");
    assert_eq!(request["method"], "GET");
    assert_eq!(request["path"], "/ws");
    assert_eq!(request["connection"], welcome["connection"]);
    assert!(
        request["remote"]
            .as_str()
            .is_some_and(|r| r.starts_with("127.0.0.1:")),
        "{request:?}"
    );
    assert!(request["headers"]["host"].is_string(), "{request:?}");
    assert!(request["id"].is_string(), "{request:?}");
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_aborts_one_invocation_and_leaves_the_others() {
    let (server, release) = start(config()).await;
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "invoke", "id": "a", "skill": "held" }))
        .await;
    client
        .send(json!({ "type": "invoke", "id": "b", "skill": "held" }))
        .await;
    client.send(json!({ "type": "cancel", "id": "a" })).await;
    let a = client.answer("a").await;
    let last = a.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["problem"]["status"], 503, "{last}");
    assert!(
        last["problem"]["detail"]
            .as_str()
            .unwrap()
            .contains("cancelled")
    );
    release.notify_one();
    assert_eq!(
        client.answer("b").await.last().unwrap()["value"],
        "released"
    );
    // Cancelling what is not running says so.
    client.send(json!({ "type": "cancel", "id": "a" })).await;
    let err = client.recv().await;
    assert_eq!(
        (err["type"].as_str(), err["id"].as_str()),
        (Some("error"), Some("a"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_frame_reaches_the_runs_gateway_receive() {
    let (server, _) = start(config()).await;
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "invoke", "id": "e", "skill": "echo" }))
        .await;
    // A message is the caller's data: a directive key in it is refused, naming its path, and
    // never reaches the run.
    client
        .send(json!({ "type": "message", "id": "e", "message": { "x": { "$context": {} } } }))
        .await;
    let refused = loop {
        let frame = client.recv().await;
        if frame["type"] == "error" {
            break frame;
        }
    };
    assert!(refused.to_string().contains("/x/$context"), "{refused}");
    client
        .send(json!({ "type": "message", "id": "e", "message": { "answer": 42 } }))
        .await;
    let frames = client.answer("e").await;
    assert_eq!(
        frames.last().unwrap()["value"],
        json!({ "heard": { "answer": 42 } })
    );
    // To a run that is not there: an error frame naming it.
    client
        .send(json!({ "type": "message", "id": "gone", "message": 1 }))
        .await;
    let err = client.recv().await;
    assert_eq!(err["id"], "gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_skill_answers_a_problem_without_its_internals() {
    let (server, _) = start(config()).await;
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "invoke", "id": "x", "skill": "broken" }))
        .await;
    let last = client.answer("x").await.pop().unwrap();
    assert_eq!(last["problem"]["status"], 500);
    assert!(!last.to_string().contains("secret detail"), "{last}");
    assert!(last["problem"]["requestId"].as_str().is_some(), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_in_the_upgrade_a_socket_authenticates_with_an_auth_frame() {
    let (server, _) = start(with_keys()).await;
    let (mut client, welcome) = WsClient::connect(server.addr, None).await;
    assert_eq!(welcome["authenticated"], false);
    // Work before authenticating is refused, and the socket stays open.
    client
        .send(json!({ "type": "invoke", "id": "1", "skill": "hello", "args": { "name": "x" } }))
        .await;
    let refused = client.recv().await;
    assert_eq!(refused["problem"]["status"], 401, "{refused}");
    assert_eq!(refused["id"], "1");
    client
        .send(json!({ "type": "auth", "key": "sg_ci_key" }))
        .await;
    assert_eq!(
        client.recv().await,
        json!({ "type": "authenticated", "key": "ci" })
    );
    client
        .send(json!({ "type": "invoke", "id": "2", "skill": "hello", "args": { "name": "x" } }))
        .await;
    assert_eq!(
        client.answer("2").await.last().unwrap()["value"],
        "Hello, x!\n"
    );
    // A key in the upgrade request is enough; a wrong one there is refused before upgrading.
    let (_, welcome) = WsClient::connect(server.addr, Some("sg_ci_key")).await;
    assert_eq!(welcome["authenticated"], true);
    let err = WsClient::open(request(server.addr, Some("sg_wrong")))
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("401"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_or_no_key_in_time_closes_the_socket_with_1008() {
    let mut settings = with_keys();
    settings.websocket.auth_timeout = Duration::from_millis(300);
    let (server, _) = start(settings).await;
    let (mut wrong, _) = WsClient::connect(server.addr, None).await;
    wrong.send(json!({ "type": "auth", "key": "nope" })).await;
    let (code, reason) = wrong.closed().await;
    assert_eq!(code, 1008);
    assert!(reason.contains("not valid"), "{reason}");
    let (mut silent, _) = WsClient::connect(server.addr, None).await;
    let (code, reason) = silent.closed().await;
    assert_eq!(code, 1008);
    assert!(reason.contains("not authenticated"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_error_frames_naming_the_field_and_the_socket_stays_open() {
    let (server, _) = start(config()).await;
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client.send_raw(Message::Text("{nope".into())).await;
    let err = client.recv().await;
    assert_eq!(err["problem"]["status"], 400);
    assert_eq!(err["problem"]["line"], 1, "{err}");
    client.send(json!({ "type": "dance" })).await;
    let err = client.recv().await;
    assert!(
        err["problem"]["detail"]
            .as_str()
            .unwrap()
            .contains("unknown frame type `dance`"),
        "{err}"
    );
    client.send(json!({ "type": "invoke", "id": "q" })).await;
    let err = client.recv().await;
    assert_eq!(err["id"], "q");
    assert!(
        err["problem"]["detail"]
            .as_str()
            .unwrap()
            .contains("invoke: missing field `skill`"),
        "{err}"
    );
    client
        .send(json!({ "type": "invoke", "id": "r", "skill": "hello", "args": { "$context": {} } }))
        .await;
    let err = client.answer("r").await.pop().unwrap();
    assert_eq!(err["problem"]["status"], 422, "{err}");
    client.send_raw(Message::Binary(vec![1, 2, 3].into())).await;
    assert_eq!(client.recv().await["type"], "error");
    client.send(json!({ "type": "ping" })).await;
    assert_eq!(client.recv().await["type"], "pong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_size_limit_closes_with_1009() {
    let (server, _) = start(ws(WsConfig {
        max_message: 1024,
        ..WsConfig::default()
    }))
    .await;
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    let big = json!({ "type": "ping", "pad": "x".repeat(4096) });
    client.send(big).await;
    let (code, _) = client.closed().await;
    assert_eq!(code, 1009);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_answers_no_ping_is_closed_as_idle_and_a_live_one_stays() {
    let idle = Duration::from_millis(400);
    let (server, _) = start(ws(WsConfig {
        idle_timeout: idle,
        ..WsConfig::default()
    }))
    .await;
    // Reading answers the server's pings (tungstenite replies on its own).
    let (mut live, _) = WsClient::connect(server.addr, None).await;
    let quiet = tokio::time::timeout(idle * 3, live.next()).await;
    assert!(quiet.is_err(), "a live socket stays open: {quiet:?}");
    // A client that reads nothing answers no ping.
    let mut dead = WsClient::open(request(server.addr, None)).await.unwrap();
    tokio::time::sleep(idle * 3).await;
    assert_eq!(dead.recv().await["type"], "welcome");
    let (code, reason) = dead.closed().await;
    assert_eq!(code, 1000);
    assert!(reason.contains("idle"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_with_1013_not_buffered_without_bound() {
    let (server, _) = start(ws(WsConfig {
        send_queue: 8,
        ..WsConfig::default()
    }))
    .await;
    let mut client = WsClient::open(request(server.addr, None)).await.unwrap();
    client
        .send(json!({ "type": "subscribe", "topic": "flood" }))
        .await;
    assert_eq!(client.recv().await["type"], "welcome");
    assert_eq!(client.recv().await["type"], "subscribed");
    let bus = server.kernel.bus().clone();
    let pad = "x".repeat(2048);
    for n in 0..20_000u64 {
        let mut e = event("flood", n);
        e.data = Some(json!({ "n": n, "pad": pad }));
        bus.emit(&e).await.unwrap();
    }
    let (code, reason) = client.closed().await;
    assert_eq!(code, 1013, "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_from_another_origin_is_refused_unless_allowed() {
    let (server, _) = start(ws(WsConfig {
        allowed_origins: vec!["https://app.example".into()],
        ..WsConfig::default()
    }))
    .await;
    let with_origin = |origin: &str| {
        let mut r = request(server.addr, None);
        r.headers_mut().insert("origin", origin.parse().unwrap());
        r
    };
    let err = WsClient::open(with_origin("https://evil.example"))
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("403"), "{err}");
    assert!(
        WsClient::open(with_origin("https://app.example"))
            .await
            .is_ok()
    );
    let own = format!("http://{}", server.addr);
    assert!(WsClient::open(with_origin(&own)).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_an_upgrade_is_refused_with_503() {
    let (server, _) = start(ws(WsConfig {
        max_connections: 1,
        ..WsConfig::default()
    }))
    .await;
    let (first, _) = WsClient::connect(server.addr, None).await;
    let err = WsClient::open(request(server.addr, None))
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("503"), "{err}");
    drop(first);
    // The slot comes back once the first socket is gone.
    let mut again = None;
    for _ in 0..50 {
        if let Ok(c) = WsClient::open(request(server.addr, None)).await {
            again = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(again.is_some(), "a freed slot is reused");
}

/// Reads subscription events until `count` arrived; returns their `n`s and event ids.
async fn topic_events(client: &mut WsClient, count: usize) -> (Vec<u64>, Vec<String>) {
    let (mut ns, mut ids) = (Vec::new(), Vec::new());
    while ns.len() < count {
        let frame = client.recv().await;
        if frame["type"] == "event" {
            ns.push(frame["event"]["data"]["n"].as_u64().unwrap());
            ids.push(frame["eventId"].as_str().unwrap().to_string());
        }
    }
    (ns, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_reconnects_from_its_last_id_misses_nothing_and_sees_nothing_twice() {
    let (server, _) = start(config()).await;
    let bus = server.kernel.bus().clone();
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "subscribe", "topic": "orders" }))
        .await;
    assert_eq!(
        client.recv().await,
        json!({ "type": "subscribed", "topic": "orders", "group": null, "gap": false })
    );
    for n in 1..=3 {
        bus.emit(&event("orders", n)).await.unwrap();
    }
    let (ns, ids) = topic_events(&mut client, 3).await;
    assert_eq!(ns, [1, 2, 3]);
    drop(client);
    // Missed while away.
    for n in 4..=5 {
        bus.emit(&event("orders", n)).await.unwrap();
    }
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "subscribe", "topic": "orders", "from": ids[2] }))
        .await;
    assert_eq!(client.recv().await["type"], "subscribed");
    bus.emit(&event("orders", 6)).await.unwrap();
    let (ns, _) = topic_events(&mut client, 3).await;
    assert_eq!(ns, [4, 5, 6]);
    let extra = tokio::time::timeout(Duration::from_millis(500), client.next()).await;
    assert!(extra.is_err(), "no duplicate: {extra:?}");
    // Unsubscribing stops the stream.
    client
        .send(json!({ "type": "unsubscribe", "topic": "orders" }))
        .await;
    assert_eq!(client.recv().await["type"], "unsubscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_hands_each_event_to_one_member_and_a_nack_or_a_lost_member_hands_it_back() {
    let (server, _) = start(config()).await;
    let bus = server.kernel.bus().clone();
    let (mut a, _) = WsClient::connect(server.addr, None).await;
    a.send(json!({ "type": "subscribe", "topic": "jobs", "group": "workers" }))
        .await;
    assert_eq!(a.recv().await["group"], "workers");
    bus.emit(&event("jobs", 1)).await.unwrap();
    let first = a.recv().await;
    assert_eq!(
        (
            first["event"]["data"]["n"].as_u64(),
            first["attempts"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let id = first["eventId"].as_str().unwrap().to_string();
    // Nacked: back at the front, delivered again.
    a.send(json!({ "type": "nack", "eventId": id })).await;
    let again = a.recv().await;
    assert_eq!(
        (again["eventId"].as_str(), again["attempts"].as_u64()),
        (Some(id.as_str()), Some(2))
    );
    // Acked: gone for good.
    a.send(json!({ "type": "ack", "eventId": id })).await;
    bus.emit(&event("jobs", 2)).await.unwrap();
    let second = a.recv().await;
    assert_eq!(second["event"]["data"]["n"], 2);
    // A member that goes away holding an event: the other member gets it.
    let (mut b, _) = WsClient::connect(server.addr, None).await;
    b.send(json!({ "type": "subscribe", "topic": "jobs", "group": "workers" }))
        .await;
    assert_eq!(b.recv().await["type"], "subscribed");
    drop(a);
    let handed = b.recv().await;
    assert_eq!(handed["event"]["data"]["n"], 2, "{handed}");
    // Acking an id this socket does not hold is an error frame.
    b.send(json!({ "type": "ack", "eventId": "ffffffff" }))
        .await;
    assert_eq!(b.recv().await["type"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_limited_to_some_skills_cannot_subscribe_to_topics() {
    let (server, _) = start(with_keys()).await;
    let (mut client, _) = WsClient::connect(server.addr, Some("sg_narrow_key")).await;
    client
        .send(json!({ "type": "subscribe", "topic": "orders" }))
        .await;
    let err = client.recv().await;
    assert_eq!(err["problem"]["status"], 403, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_asyncapi_document_is_served_and_names_every_frame_type() {
    let (server, _) = start(config()).await;
    let response = server.get("/asyncapi.yaml").await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let doc: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(doc["asyncapi"], "3.0.0");
    let messages = doc["components"]["messages"].as_object().unwrap();
    for kind in skillgate::gateway::ws::protocol::CLIENT_TYPES {
        assert!(messages.contains_key(kind), "{kind} documented");
    }
    for kind in [
        "welcome",
        "authenticated",
        "log",
        "runMessage",
        "partial",
        "event",
        "result",
        "error",
        "subscribed",
        "unsubscribed",
        "gap",
        "pong",
    ] {
        assert!(messages.contains_key(kind), "{kind} documented");
    }
    // Every channel message points at a documented one.
    for (_, m) in doc["channels"]["socket"]["messages"].as_object().unwrap() {
        let target = m["$ref"].as_str().unwrap();
        let name = target.rsplit('/').next().unwrap();
        assert!(messages.contains_key(name), "{target}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_invocations_answer_then_closes_with_1001() {
    let (mut server, release) = start(config()).await;
    let (mut client, _) = WsClient::connect(server.addr, None).await;
    client
        .send(json!({ "type": "invoke", "id": "h", "skill": "holding" }))
        .await;
    // The run is in flight (it said so) before the shutdown starts.
    let said = client.until(|f| f["type"] == "log").await;
    assert_eq!(said.last().unwrap()["log"]["text"], "holding", "{said:?}");
    server.begin_shutdown("test");
    // Once the server is stopping, new work is refused (503) while the run goes on.
    let mut refused = false;
    for n in 0..100 {
        let id = format!("late{n}");
        client
            .send(json!({ "type": "invoke", "id": id, "skill": "hello", "args": { "name": "x" } }))
            .await;
        let late = client.answer(&id).await.pop().unwrap();
        if late["problem"]["status"] == 503 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "new work refused while stopping");
    release.notify_one();
    assert_eq!(client.answer("h").await.pop().unwrap()["value"], "released");
    let (code, _) = client.closed().await;
    assert_eq!(code, 1001);
    assert!(server.finish().await.drained);
}
