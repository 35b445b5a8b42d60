//! `POST /runs/{id}/retry` (a recorded run run again for its principal, linked to the old one;
//! only by an admin key; refused with 409 when the record does not hold its args whole) and
//! `GET /runs/stream` (runs as they start and end, each listener seeing what it may).

use std::time::Duration;

use serde_json::{Value, json};
use skillgate::events::KernelBus;

use crate::support::common::Project;
use crate::support::server::{SseReader, TestServer, problem, with_keys};

/// A hang guard on waits that end only if a rule holds.
const GUARD: Duration = Duration::from_secs(30);

fn project() -> Project {
    let p = Project::new();
    p.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\nmetadata:\n  params: { type: object, properties: { name: { type: string } }, required: [name] }\n---\nHello, :arg[name]!",
    )
    .skill(
        "login.skill.js",
        "export const frontmatter = { description: 'Logs in.', metadata: { params: { type: 'object', properties: {\n\
           user: { type: 'string' }, password: { type: 'string', writeOnly: true } } } } };\n\
         export default async (ctx, args) => ({ user: args.user });\n",
    );
    p
}

/// Waits until `n` runs in all are recorded, then lists them as the admin key.
async fn recorded(server: &TestServer, n: u64) -> Vec<Value> {
    tokio::time::timeout(GUARD, server.kernel.bus().runs().settled_at_least(n))
        .await
        .expect("the runs are recorded");
    let page: Value = server
        .get_as("sg_ops_key", "/runs")
        .await
        .json()
        .await
        .unwrap();
    page["runs"].as_array().unwrap().clone()
}

async fn retry_as(server: &TestServer, key: &str, id: &str) -> reqwest::Response {
    server
        .post_json_as(key, &format!("/runs/{id}/retry"), &json!({}))
        .await
}

#[tokio::test]
async fn an_admin_retries_a_run_as_a_new_run_for_its_principal_linked_to_the_old_one() {
    let server = TestServer::start(project(), with_keys()).await;
    let response = server
        .post_json_as("sg_ci_key", "/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(response.status(), 200);
    let first = recorded(&server, 1).await;
    let old = first[0]["id"].as_str().unwrap().to_string();
    let response = retry_as(&server, "sg_ops_key", &old).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["result"], "Hello, Ada!");
    assert_eq!(answer["parent"], json!(old));
    let new = answer["id"].as_str().unwrap();
    assert_ne!(new, old);
    let runs = recorded(&server, 2).await;
    let retried = runs
        .iter()
        .find(|r| r["id"] == new)
        .expect("the retry is recorded");
    // It ran for the key it repeats, not for the admin who asked.
    assert_eq!(
        (
            &retried["door"],
            &retried["principal"],
            &retried["status"],
            &retried["parent"]
        ),
        (&json!("retry"), &json!("key:ci"), &json!("ok"), &json!(old))
    );
}

#[tokio::test]
async fn only_an_admin_key_retries_and_a_run_the_record_does_not_hold_whole_is_409() {
    let server = TestServer::start(project(), with_keys()).await;
    let response = server
        .post_json_as(
            "sg_ci_key",
            "/invoke/login",
            &json!({ "user": "ada", "password": "hunter2" }),
        )
        .await;
    assert_eq!(response.status(), 200);
    let runs = recorded(&server, 1).await;
    let id = runs[0]["id"].as_str().unwrap();
    // Its own run, but a retry acts for a principal: admin only.
    problem(retry_as(&server, "sg_ci_key", id).await, 403).await;
    assert_eq!(
        server
            .post_json(&format!("/runs/{id}/retry"), &json!({}))
            .await
            .status(),
        401
    );
    // The password was redacted in the record: running it again would not be the same run.
    let body = problem(retry_as(&server, "sg_ops_key", id).await, 409).await;
    assert_eq!(body["type"], "/docs#problem-not-retryable");
    assert!(
        body["detail"].as_str().unwrap().contains("redacted"),
        "{body}"
    );
    problem(retry_as(&server, "sg_ops_key", "no-such-run").await, 404).await;
    // Nothing ran for the refused retries.
    assert_eq!(server.kernel.bus().runs().written_total(), 1);
}

async fn stream_as(server: &TestServer, key: &str) -> SseReader {
    let response = server
        .client
        .get(server.url("/runs/stream"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    SseReader::new(response)
}

#[tokio::test]
async fn the_runs_stream_tells_each_listener_of_the_runs_it_may_see_as_they_start_and_end() {
    let server = TestServer::start(project(), with_keys()).await;
    let mut admin = stream_as(&server, "sg_ops_key").await;
    let mut narrow = stream_as(&server, "sg_narrow_key").await;
    for (key, name) in [("sg_ci_key", "Ci"), ("sg_narrow_key", "Narrow")] {
        let response = server
            .post_json_as(key, "/invoke/hello", &json!({ "name": name }))
            .await;
        assert_eq!(response.status(), 200);
    }
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let event = tokio::time::timeout(GUARD, admin.next())
            .await
            .unwrap()
            .unwrap();
        seen.push((
            event.event,
            event.data["principal"].clone(),
            event.data["status"].clone(),
        ));
    }
    for principal in ["key:ci", "key:narrow"] {
        let of: Vec<_> = seen.iter().filter(|(_, p, _)| *p == principal).collect();
        assert_eq!(of.len(), 2, "{seen:?}");
        assert_eq!(
            (of[0].0.as_str(), of[1].0.as_str()),
            ("start", "end"),
            "{seen:?}"
        );
        assert_eq!(of[1].2, "ok");
    }
    // A key that is not admin hears only of its own runs.
    for phase in ["start", "end"] {
        let event = tokio::time::timeout(GUARD, narrow.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(event.event, phase);
        assert_eq!(event.data["principal"], "key:narrow", "{:?}", event.data);
    }
    assert_eq!(server.get("/runs/stream").await.status(), 401);
}
