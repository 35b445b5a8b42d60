//! Runs from each door, read back over `GET /runs` and `GET /runs/{id}`: door, principal,
//! status, problem and duration; who may read which runs; what is redacted; and a store that
//! refuses them costs the runs, not the requests.

use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use skillgate::events::{Event, KernelBus, WithBus};

use crate::support::common::Project;
use crate::support::server::{TestServer, config, problem, with_keys};
use crate::support::stores::Backend;
use crate::support::ws_client::WsClient;

/// A hang guard on waits that end only if a rule holds.
const GUARD: Duration = Duration::from_secs(30);

fn project() -> Project {
    let p = Project::new();
    p.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\nmetadata:\n  params: { type: object, properties: { name: { type: string } }, required: [name] }\n---\nHello, :arg[name]!",
    )
    .skill(
        "boom.skill.js",
        "export const frontmatter = { description: 'Fails.' };\nexport default async () => { throw new Error('the database is down'); };\n",
    )
    .skill(
        "login.skill.js",
        "export const frontmatter = { description: 'Logs in.', metadata: { params: { type: 'object', properties: {\n\
           user: { type: 'string' }, password: { type: 'string', writeOnly: true },\n\
           headers: { type: 'object' } } } } };\n\
         export default async (ctx, args) => ({ user: args.user, authorization: 'Bearer sk-returned' });\n",
    )
    .skill(
        "seen.skill.md",
        "---\nname: seen\ndescription: Handles deploys.\nmetadata:\n  event:\n    route: deploy\n---\nseen\n",
    );
    p
}

/// Waits until `n` runs in all are recorded, then lists them (as `key`, or without one).
async fn recorded(server: &TestServer, n: u64, key: Option<&str>) -> Vec<Value> {
    let runs = server.kernel.bus().runs();
    tokio::time::timeout(GUARD, runs.settled_at_least(n))
        .await
        .expect("the runs are recorded");
    let response = match key {
        Some(key) => server.get_as(key, "/runs").await,
        None => server.get("/runs").await,
    };
    assert_eq!(response.status(), 200);
    let page: Value = response.json().await.unwrap();
    page["runs"].as_array().unwrap().clone()
}

/// The one run of `door` among `runs`.
fn of_door<'a>(runs: &'a [Value], door: &str) -> &'a Value {
    let found: Vec<_> = runs.iter().filter(|r| r["door"] == door).collect();
    assert_eq!(found.len(), 1, "one run from {door}: {runs:?}");
    found[0]
}

#[tokio::test]
async fn a_run_over_http_is_recorded_with_its_door_principal_status_duration_args_and_result() {
    let server = TestServer::start(project(), config()).await;
    let response = server
        .post_json("/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(response.status(), 200);
    let runs = recorded(&server, 1, None).await;
    let run = of_door(&runs, "http");
    assert_eq!(run["skill"], "hello");
    assert_eq!(run["principal"], "local");
    assert_eq!(run["status"], "ok");
    assert_eq!(run["problem"], Value::Null);
    assert!(run["durationMs"].as_f64().unwrap() > 0.0, "{run}");
    assert!(run["started"].as_str().unwrap().starts_with("20"), "{run}");
    let id = run["id"].as_str().unwrap();
    let whole: Value = server
        .get(&format!("/runs/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["args"], json!({ "name": "Ada" }));
    assert_eq!(whole["result"], json!("Hello, Ada!"));
}

#[tokio::test]
async fn a_failed_run_is_recorded_with_its_problem_type_and_bad_args_as_refused() {
    let server = TestServer::start(project(), config()).await;
    assert_eq!(
        server.post_json("/invoke/boom", &json!({})).await.status(),
        500
    );
    assert_eq!(
        server.post_json("/invoke/hello", &json!({})).await.status(),
        422
    );
    let runs = recorded(&server, 2, None).await;
    let boom = runs.iter().find(|r| r["skill"] == "boom").unwrap();
    assert_eq!(boom["status"], "failed");
    assert_eq!(boom["problem"], "/docs#problem-internal");
    let whole: Value = server
        .get(&format!("/runs/{}", boom["id"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    // The operator reads what the caller was not told.
    assert!(
        whole["error"]
            .as_str()
            .unwrap()
            .contains("the database is down"),
        "{whole}"
    );
    let bad = runs.iter().find(|r| r["skill"] == "hello").unwrap();
    assert_eq!(bad["status"], "refused");
    assert_eq!(bad["problem"], "/docs#problem-invalid-args");
    let failed: Value = server
        .get("/runs?status=failed")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(failed["runs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn runs_from_websocket_mcp_and_event_handlers_are_recorded_with_their_door() {
    let server = TestServer::start(project(), with_keys()).await;
    let (mut ws, _) = WsClient::connect(server.addr, Some("sg_ci_key")).await;
    ws.send(json!({ "type": "invoke", "id": "w", "skill": "hello", "args": { "name": "Ws" } }))
        .await;
    let answer = ws.answer("w").await;
    assert_eq!(answer.last().unwrap()["type"], "result", "{answer:?}");
    let mcp = crate::mcp::served::connect(&server, "sg_ci_key")
        .await
        .unwrap();
    let called = mcp
        .call_tool(
            CallToolRequestParams::new("hello".to_string())
                .with_arguments(crate::mcp::served::args(json!({ "name": "Mcp" }))),
        )
        .await
        .unwrap();
    assert_ne!(called.is_error, Some(true));
    // What `serve` does at start: the declared routes get their handlers.
    skillgate::events::routes::subscribe_declared(&server.kernel).await;
    let mut event = Event::new("deploy", "message");
    event.data = Some(json!({ "v": 2 }));
    server.kernel.bus().emit(&event).await.unwrap();
    let runs = recorded(&server, 3, Some("sg_ops_key")).await;
    let ws = of_door(&runs, "websocket");
    assert_eq!(
        (&ws["skill"], &ws["principal"], &ws["status"]),
        (&json!("hello"), &json!("key:ci"), &json!("ok"))
    );
    let mcp = of_door(&runs, "mcp");
    assert_eq!(
        (&mcp["skill"], &mcp["principal"], &mcp["status"]),
        (&json!("hello"), &json!("key:ci"), &json!("ok"))
    );
    let handled = of_door(&runs, "event");
    assert_eq!(
        (&handled["skill"], &handled["status"]),
        (&json!("seen"), &json!("ok"))
    );
    let whole: Value = server
        .get_as(
            "sg_ops_key",
            &format!("/runs/{}", handled["id"].as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["event"], json!(event.id));
}

#[tokio::test]
async fn fields_marked_secret_and_credential_headers_are_redacted_in_the_record() {
    let server = TestServer::start(project(), config()).await;
    let args = json!({
        "user": "ada", "password": "hunter2",
        "headers": { "Authorization": "Bearer sk-sent", "accept": "text/plain" }
    });
    assert_eq!(server.post_json("/invoke/login", &args).await.status(), 200);
    let runs = recorded(&server, 1, None).await;
    let id = runs[0]["id"].as_str().unwrap();
    let whole: Value = server
        .get(&format!("/runs/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        whole["args"],
        json!({ "user": "ada", "password": "[redacted]", "headers": { "Authorization": "[redacted]", "accept": "text/plain" } })
    );
    assert_eq!(
        whole["result"],
        json!({ "user": "ada", "authorization": "[redacted]" })
    );
    assert_eq!(whole["redacted"], true);
    // Nor are they in the store.
    let stored = server.kernel.bus().store().run(id).await.unwrap().unwrap();
    for secret in ["hunter2", "sk-sent", "sk-returned"] {
        assert!(
            !format!("{stored:?}").contains(secret),
            "{secret} kept: {stored:?}"
        );
    }
}

#[tokio::test]
async fn a_key_sees_only_its_own_runs_and_an_admin_key_every_run() {
    let server = TestServer::start(project(), with_keys()).await;
    for key in ["sg_ci_key", "sg_narrow_key"] {
        let response = server
            .post_json_as(key, "/invoke/hello", &json!({ "name": "x" }))
            .await;
        assert_eq!(response.status(), 200);
    }
    let own = recorded(&server, 2, Some("sg_ci_key")).await;
    assert_eq!(own.len(), 1);
    assert_eq!(own[0]["principal"], "key:ci");
    let ci_run = own[0]["id"].as_str().unwrap().to_string();
    let every = recorded(&server, 2, Some("sg_ops_key")).await;
    assert_eq!(every.len(), 2);
    // Another key's run is not there for it, by id or by filter.
    let response = server
        .get_as("sg_narrow_key", &format!("/runs/{ci_run}"))
        .await;
    problem(response, 404).await;
    let response = server
        .get_as("sg_narrow_key", "/runs?principal=key:ci")
        .await;
    problem(response, 403).await;
    // Without a key, nothing.
    assert_eq!(server.get("/runs").await.status(), 401);
}

#[tokio::test]
async fn a_key_reads_its_failed_run_without_the_error_and_layers_its_answer_left_out() {
    let server = TestServer::start(project(), with_keys()).await;
    let response = server
        .post_json_as("sg_ci_key", "/invoke/boom", &json!({}))
        .await;
    assert_eq!(response.status(), 500);
    let own = recorded(&server, 1, Some("sg_ci_key")).await;
    let path = format!("/runs/{}", own[0]["id"].as_str().unwrap());
    let as_caller: Value = server
        .get_as("sg_ci_key", &path)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(as_caller["status"], "failed");
    assert_eq!(as_caller["problem"], "/docs#problem-internal");
    assert!(
        !as_caller.to_string().contains("the database is down"),
        "{as_caller}"
    );
    assert_eq!(as_caller.get("entries"), None, "{as_caller}");
    let as_admin: Value = server
        .get_as("sg_ops_key", &path)
        .await
        .json()
        .await
        .unwrap();
    assert!(
        as_admin["error"]
            .as_str()
            .unwrap()
            .contains("the database is down")
    );
    assert!(as_admin["entries"].is_array(), "{as_admin}");
}

#[tokio::test]
async fn a_mistake_in_the_query_is_told_with_its_field() {
    let server = TestServer::start(project(), config()).await;
    let body = problem(server.get("/runs?status=done").await, 400).await;
    assert!(
        body["detail"].as_str().unwrap().contains("`status`"),
        "{body}"
    );
    let body = problem(server.get("/runs?since=yesterday").await, 400).await;
    assert!(
        body["detail"].as_str().unwrap().contains("`since`"),
        "{body}"
    );
}

#[tokio::test]
async fn runs_the_store_refuses_are_dropped_and_counted_and_requests_keep_working() {
    let backend = Backend::sqlite().unwrap();
    let bus = backend
        .bus(
            skillgate::events::Limits::default(),
            Duration::from_secs(30),
        )
        .await;
    let server = TestServer::start_with(project(), config(), |b| b.bus(bus)).await;
    let Backend::Sqlite(dir) = &backend else {
        unreachable!()
    };
    let file = dir.path().join("events.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    sqlx::query("DROP TABLE sg_runs")
        .execute(&pool)
        .await
        .unwrap();
    let response = server
        .post_json("/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(response.status(), 200);
    let runs = server.kernel.bus().runs();
    tokio::time::timeout(GUARD, runs.settled_at_least(1))
        .await
        .unwrap();
    assert_eq!((runs.written_total(), runs.dropped_total()), (0, 1));
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("skillgate_runs_dropped_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_failed_run_keeps_its_entries_timings_and_a_quick_good_one_only_when_sampled() {
    let server = TestServer::start(project(), config()).await;
    assert_eq!(
        server.post_json("/invoke/boom", &json!({})).await.status(),
        500
    );
    assert_eq!(
        server
            .post_json("/invoke/hello", &json!({ "name": "Ada" }))
            .await
            .status(),
        200
    );
    let runs = recorded(&server, 2, None).await;
    let whole = |run: &Value| {
        let path = format!("/runs/{}", run["id"].as_str().unwrap());
        let server = &server;
        async move { server.get(&path).await.json::<Value>().await.unwrap() }
    };
    let boom = whole(runs.iter().find(|r| r["skill"] == "boom").unwrap()).await;
    let entries = boom["entries"].as_array().expect("a failed run's entries");
    // The layer that runs the skill's body (`execute`) failed with it.
    let execute = entries
        .iter()
        .find(|e| e["name"] == "execute" && e["kind"] == "middleware" && e["skill"] == "boom")
        .unwrap_or_else(|| panic!("`execute` among {entries:?}"));
    assert_eq!(execute["ok"], false);
    assert!(execute["durationMs"].as_f64().unwrap() >= 0.0);
    // Kept beside what else its detail says: why it failed.
    assert!(
        boom["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{boom}"
    );
    // The default sample (1%) leaves the first good, quick run out.
    let hello = whole(runs.iter().find(|r| r["skill"] == "hello").unwrap()).await;
    assert_eq!(hello.get("entries"), None, "{hello}");
    // Sampling every run keeps them all.
    let record = skillgate::events::runs::RecordConfig {
        detail_sample: 1.0,
        ..Default::default()
    };
    server.kernel.bus().runs().configure(Some(record));
    server
        .post_json("/invoke/hello", &json!({ "name": "Bo" }))
        .await;
    let runs = recorded(&server, 3, None).await;
    let sampled = whole(&runs[0]).await;
    let entries = sampled["entries"]
        .as_array()
        .expect("a sampled run's entries");
    assert!(
        entries
            .iter()
            .any(|e| e["name"] == "execute" && e["skill"] == "hello" && e["ok"] == true),
        "{entries:?}"
    );
    // Outer layers start first: the list is in starting order.
    let starts: Vec<f64> = entries
        .iter()
        .map(|e| e["startMs"].as_f64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
}
