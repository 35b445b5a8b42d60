//! `POST /invoke/{skill}` over a real socket: JSON results, SSE streaming, the raw response
//! handle, request ids, and every error status as a problem document.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::Context;
use skillgate::events::KernelBus;
use tokio::sync::Notify;

use crate::support::common::{Project, native};
use crate::support::server::{TestServer, config, problem};

/// The `hello` skill with a strict schema: `name` is required and `age`, when given, is an
/// integer of 0 or more.
fn strict_hello_project() -> Project {
    let project = Project::new();
    project.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\nmetadata:\n  params:\n    type: object\n    properties:\n      name: { type: string }\n      age: { type: integer, minimum: 0 }\n    required: [name]\n---\nHello, :arg[name]!\n",
    );
    project
}

#[tokio::test]
async fn invoke_answers_with_the_result_as_json() {
    let mut server = TestServer::start(strict_hello_project(), config()).await;
    let response = server
        .post_json("/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("x-request-id").is_some());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({ "result": "Hello, Ada!\n" }));
    server.finish().await;
}

#[tokio::test]
async fn an_empty_body_is_empty_args() {
    let project = Project::new();
    project.skill(
        "noop.skill.md",
        "---\nname: noop\ndescription: Nothing.\n---\nok\n",
    );
    let mut server = TestServer::start(project, config()).await;
    let response = server
        .client
        .post(server.url("/invoke/noop"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({ "result": "ok\n" })
    );
    server.finish().await;
}

#[tokio::test]
async fn malformed_json_is_400_with_where_parsing_stopped() {
    let mut server = TestServer::start(strict_hello_project(), config()).await;
    let response = server
        .client
        .post(server.url("/invoke/hello"))
        .header("content-type", "application/json")
        .body("{\"name\": \"Ada\",\n  oops}")
        .send()
        .await
        .unwrap();
    let body = problem(response, 400).await;
    assert_eq!(body["line"], 2);
    assert!(body["detail"].as_str().unwrap().contains("not valid JSON"));
    // A JSON value that is not an object is refused the same way.
    let response = server.post_json("/invoke/hello", &json!([1, 2])).await;
    let body = problem(response, 400).await;
    assert!(body["detail"].as_str().unwrap().contains("array"), "{body}");
    server.finish().await;
}

#[tokio::test]
async fn unknown_skill_is_404_with_a_suggestion() {
    let mut server = TestServer::start(strict_hello_project(), config()).await;
    let response = server.post_json("/invoke/helo", &json!({})).await;
    let body = problem(response, 404).await;
    assert_eq!(body["skill"], "helo");
    assert_eq!(body["suggestions"][0], "hello");
    server.finish().await;
}

#[tokio::test]
async fn args_failing_the_schema_are_422_with_each_field_path() {
    let mut server = TestServer::start(strict_hello_project(), config()).await;
    let response = server
        .post_json("/invoke/hello", &json!({ "name": 7, "age": -1 }))
        .await;
    let body = problem(response, 422).await;
    let paths: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"/name"), "{body}");
    assert!(paths.contains(&"/age"), "{body}");
    server.finish().await;
}

#[tokio::test]
async fn a_failing_skill_is_500_with_a_generic_body_and_the_cause_only_in_the_log() {
    let project = Project::new();
    let mut server = TestServer::start_with(project, config(), |b| {
        b.native(native(
            "name: leaky\ndescription: Fails with a secret.\n",
            |_ctx: Context, _args| async move {
                Err(skillgate::SkillError::failed(
                    "database password is hunter2",
                ))
            },
        ))
    })
    .await;
    let response = server
        .client
        .post(server.url("/invoke/leaky"))
        .header("x-request-id", "req-500")
        .send()
        .await
        .unwrap();
    let body = problem(response, 500).await;
    assert!(!body.to_string().contains("hunter2"), "{body}");
    assert_eq!(body["requestId"], "req-500");
    server.finish().await;
}

#[tokio::test]
async fn a_skill_past_the_timeout_is_aborted_and_answered_504() {
    let project = Project::new();
    let mut settings = config();
    settings.timeout = Duration::from_millis(200);
    let mut server = TestServer::start_with(project, settings, |b| {
        b.native(native(
            "name: slow\ndescription: Sleeps until aborted.\n",
            |ctx: Context, _args| async move {
                ctx.signal().cancelled().await;
                Ok(Some(json!("aborted")))
            },
        ))
    })
    .await;
    let response = server.post_json("/invoke/slow", &json!({})).await;
    let body = problem(response, 504).await;
    assert!(body["detail"].as_str().unwrap().contains("200 ms"));
    server.finish().await;
}

#[tokio::test]
async fn hidden_skills_are_404_over_http_unless_exposed() {
    let project = Project::new();
    project.skill(
        "secret.skill.md",
        "---\nname: secret\ndescription: Internal.\nmetadata:\n  visibility: hidden\n---\nsecret\n",
    );
    let mut server = TestServer::start(project, config()).await;
    problem(server.post_json("/invoke/secret", &json!({})).await, 404).await;
    problem(server.get("/skills/secret").await, 404).await;
    let list: Value = server.get("/skills").await.json().await.unwrap();
    assert!(!list.to_string().contains("secret"));
    let project = std::mem::replace(&mut server.project, Project::new());
    server.finish().await;

    let mut settings = config();
    settings.expose_hidden = vec!["sec*".into()];
    let mut server = TestServer::start(project, settings).await;
    let response = server.post_json("/invoke/secret", &json!({})).await;
    assert_eq!(
        response.json::<Value>().await.unwrap()["result"],
        "secret\n"
    );
    server.finish().await;
}

#[tokio::test]
async fn with_gateway_message_on_each_request_is_announced_before_the_skill_runs() {
    let mut settings = config();
    settings.announce = true;
    let mut server = TestServer::start(strict_hello_project(), settings).await;
    server
        .kernel
        .bus()
        .subscribe_queue("gateway-message", "watch", false)
        .await
        .unwrap();
    let response = server
        .client
        .post(server.url("/invoke/hello"))
        .header("x-request-id", "msg-1")
        .json(&json!({ "name": "Ada" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let got = server
        .kernel
        .bus()
        .wait("gateway-message", "watch", Duration::from_secs(2), 10, true)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let event = &got[0].event;
    assert_eq!(event.source.as_deref(), Some("http"));
    let data = event.data.as_ref().unwrap();
    assert_eq!(data["skill"], "hello");
    assert_eq!(data["args"], json!({ "name": "Ada" }));
    assert_eq!(data["requestId"], "msg-1");
    server.finish().await;
}

#[tokio::test]
async fn middleware_are_not_invokable_over_http() {
    let mut server = TestServer::start(strict_hello_project(), config()).await;
    problem(server.post_json("/invoke/execute", &json!({})).await, 404).await;
    let list: Value = server.get("/skills").await.json().await.unwrap();
    let names: Vec<&str> = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"hello") && names.contains(&"event-emit"),
        "{names:?}"
    );
    assert!(!names.contains(&"validate-args"), "{names:?}");
    server.finish().await;
}

#[tokio::test]
async fn the_request_id_is_accepted_returned_and_carried_into_the_context_and_logs() {
    let project = Project::new();
    let mut server = TestServer::start_with(project, config(), |b| {
        b.native(native(
            "name: whoami\ndescription: Reads the request.\n",
            |ctx: Context, _args| async move {
                let logged = ctx.log(json!({ "type": "seen", "text": "here" }))?;
                Ok(Some(json!({
                    "id": ctx.get("nonlocals.request.id")?,
                    "transport": ctx.get("nonlocals.gateway.transport")?,
                    "method": ctx.get("nonlocals.request.method")?,
                    "logged": logged.get("requestId").cloned(),
                })))
            },
        ))
    })
    .await;
    let response = server
        .client
        .post(server.url("/invoke/whoami"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "abc-123");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["result"],
        json!({ "id": "abc-123", "transport": "http", "method": "POST", "logged": "abc-123" })
    );
    // Without one, an id is generated and returned.
    let response = server.post_json("/invoke/whoami", &json!({})).await;
    let generated = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"]["id"], generated.as_str());
    server.finish().await;
}

/// A tool that sends `n` chunks with `gateway-send`, waiting for `go` before each after the
/// first, so the test can show the first arrives while the run is still going.
fn chunky(go: Option<Arc<Notify>>) -> skillgate::skills::tool::Tool {
    native(
        "name: chunky\ndescription: Streams.\n",
        move |ctx: Context, _args| {
            let go = go.clone();
            async move {
                ctx.log(json!({ "type": "progress", "text": "starting" }))?;
                for i in 0..3 {
                    if let Some(go) = go.as_ref().filter(|_| i > 0) {
                        go.notified().await;
                    }
                    ctx.invoke(
                        "gateway-send",
                        json!({ "message": format!("part {i}") }),
                        Default::default(),
                    )
                    .await?;
                }
                Ok(Some(json!({ "parts": 3 })))
            }
        },
    )
}

#[tokio::test]
async fn sse_streams_each_chunk_while_the_skill_runs_and_a_result_event_closes_it() {
    let go = Arc::new(Notify::new());
    let tool = chunky(Some(go.clone()));
    let mut server = TestServer::start_with(Project::new(), config(), |b| b.native(tool)).await;
    let mut events = server.stream("/invoke/chunky", &json!({})).await;
    let mut seen = Vec::new();
    for expected in ["part 0", "part 1", "part 2"] {
        // Each part arrives before the skill is allowed to send the next one.
        loop {
            let event = events.next().await.expect("stream still open");
            seen.push(event.clone());
            if event.event == "message" {
                assert_eq!(event.data, json!(expected));
                break;
            }
        }
        go.notify_one();
    }
    let last = events.next().await.expect("result event");
    assert_eq!(last.event, "result");
    assert_eq!(last.data, json!({ "result": { "parts": 3 } }));
    assert!(
        events.next().await.is_none(),
        "the result event closes the stream"
    );
    let log = seen
        .iter()
        .find(|e| e.event == "log")
        .expect("a log event streamed");
    assert_eq!(log.data["type"], "progress");
    assert!(log.data["requestId"].is_string());
    server.finish().await;
}

#[tokio::test]
async fn sse_ends_with_an_error_event_when_the_skill_fails() {
    let mut server = TestServer::start(strict_hello_project(), config()).await;
    let mut events = server.stream("/invoke/hello", &json!({ "name": 1 })).await;
    let mut last = None;
    while let Some(event) = events.next().await {
        last = Some(event);
    }
    let last = last.expect("an event");
    assert_eq!(last.event, "error");
    assert_eq!(last.data["status"], 422);
    server.finish().await;
}

#[tokio::test]
async fn sse_streams_bus_events_the_run_emits() {
    let project = Project::new();
    let mut server = TestServer::start_with(project, config(), |b| {
        b.native(native(
            "name: announcer\ndescription: Emits.\n",
            |ctx: Context, _args| async move {
                ctx.invoke(
                    "event-emit",
                    json!({ "topic": "agent.progress", "data": { "step": 1 } }),
                    Default::default(),
                )
                .await?;
                Ok(Some(json!("done")))
            },
        ))
    })
    .await;
    let mut events = server.stream("/invoke/announcer", &json!({})).await;
    let mut got = Vec::new();
    while let Some(event) = events.next().await {
        got.push(event);
    }
    let bus = got
        .iter()
        .find(|e| e.event == "event")
        .expect("bus event streamed");
    assert_eq!(bus.data["topic"], "agent.progress");
    assert_eq!(bus.data["data"], json!({ "step": 1 }));
    assert_eq!(got.last().unwrap().event, "result");
    server.finish().await;
}

#[tokio::test]
async fn web_send_writes_status_headers_and_streamed_chunks() {
    let project = Project::new();
    let mut server = TestServer::start_with(project, config(), |b| {
        b.native(native(
            "name: teapot\ndescription: Raw response.\n",
            |ctx: Context, _args| async move {
                ctx.invoke(
                    "web-send",
                    json!({ "status": 418, "headers": { "content-type": "text/csv", "x-brew": "earl-grey" } }),
                    Default::default(),
                )
                .await?;
                for row in ["a,b\n", "1,2\n"] {
                    ctx.invoke("web-send", json!({ "chunk": row }), Default::default()).await?;
                }
                // A second head is refused: the body has started.
                let again = ctx.invoke("web-send", json!({ "status": 200 }), Default::default()).await;
                assert!(again.is_err());
                Ok(Some(json!("ignored: the response was written")))
            },
        ))
    })
    .await;
    let response = server.post_json("/invoke/teapot", &json!({})).await;
    assert_eq!(response.status(), 418);
    assert_eq!(response.headers()["content-type"], "text/csv");
    assert_eq!(response.headers()["x-brew"], "earl-grey");
    assert_eq!(response.text().await.unwrap(), "a,b\n1,2\n");
    server.finish().await;
}

#[tokio::test]
async fn gateway_send_messages_join_the_json_answer() {
    let tool = chunky(None);
    let mut server = TestServer::start_with(Project::new(), config(), |b| b.native(tool)).await;
    let body: Value = server
        .post_json("/invoke/chunky", &json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["result"], json!({ "parts": 3 }));
    assert_eq!(body["messages"], json!(["part 0", "part 1", "part 2"]));
    server.finish().await;
}

#[tokio::test]
async fn gateway_send_outside_a_gateway_run_fails_clearly() {
    let kernel = Project::new().kernel();
    let err = kernel
        .invoke(
            "gateway-send",
            json!({ "message": "hi" }),
            Default::default(),
        )
        .await
        .unwrap_err();
    assert!(
        err.message().contains("not started by a transport"),
        "{err}"
    );
}

#[tokio::test]
async fn a_long_poll_ends_before_the_request_timeout_with_its_empty_answer() {
    // event-wait waits 30 s by default; the request may take 1 s: the caller gets `[]`, not a
    // timeout.
    let mut settings = config();
    settings.timeout = Duration::from_secs(1);
    let mut server = TestServer::start(Project::new(), settings).await;
    let response = server
        .post_json("/invoke/event-wait", &json!({ "topic": "idle" }))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"], json!([]), "{body}");
    server.finish().await;
}
