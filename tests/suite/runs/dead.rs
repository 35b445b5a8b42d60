//! `GET /dead` and `POST /dead/{id}/replay` over HTTP: a handler's event that used up its
//! deliveries is listed for an admin key, replayed into its queue, and handled as a new run
//! recorded with the event; other callers are refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::events::memory::MemoryStore;
use skillgate::events::{Bus, BusConfig, Event, KernelBus, Limits, WithBus};

use crate::support::common::{Project, native};
use crate::support::server::{TestServer, problem, with_keys};

const GUARD: Duration = Duration::from_secs(30);

/// A server of `project` (with keys) whose `deploy` handler fails while `broken` holds;
/// deliveries are tried twice.
pub(crate) async fn start(project: Project, broken: Arc<AtomicBool>) -> TestServer {
    let store = Arc::new(MemoryStore::new(Limits {
        delivery_limit: 2,
        ..Limits::default()
    }));
    let bus = Arc::new(Bus::new(
        store,
        BusConfig::with_visibility(Duration::from_millis(200)),
    ));
    let server = TestServer::start_with(project, with_keys(), move |b| {
        b.bus(bus).native(native(
            "name: deployer\ndescription: Deploys.\n",
            move |_ctx, _args| {
                let broken = broken.clone();
                async move {
                    if broken.load(Ordering::SeqCst) {
                        return Err(skillgate::SkillError::failed("the cluster is down"));
                    }
                    Ok(Some(json!("deployed")))
                }
            },
        ))
    })
    .await;
    server
        .kernel
        .bus()
        .subscribe_handler(&server.kernel, "deploy", "deployer", None, false)
        .await
        .unwrap();
    server
}

/// The dead letters once there is one (a hang guard fails the test otherwise).
pub(crate) async fn until_dead(server: &TestServer) -> Vec<Value> {
    tokio::time::timeout(GUARD, async {
        loop {
            let found = letters(server).await;
            if !found.is_empty() {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the event dies after its deliveries")
}

async fn letters(server: &TestServer) -> Vec<Value> {
    let response = server.get_as("sg_ops_key", "/dead").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["letters"].as_array().unwrap().clone()
}

#[tokio::test]
async fn an_admin_lists_a_dead_letter_and_replays_it_as_a_new_handled_run() {
    let broken = Arc::new(AtomicBool::new(true));
    let server = start(Project::new(), broken.clone()).await;
    let mut event = Event::new("deploy", "release");
    event.data = Some(json!({ "version": "1.2.3" }));
    server.kernel.bus().emit(&event).await.unwrap();
    // Two failed deliveries, then the letter.
    let found = until_dead(&server).await;
    assert_eq!(found.len(), 1);
    let letter = &found[0];
    assert_eq!(
        (&letter["topic"], &letter["attempts"]),
        (&json!("deploy"), &json!(2))
    );
    assert_eq!(letter["event"]["id"], json!(event.id));
    assert_eq!(letter["event"]["data"]["version"], "1.2.3");
    let id = letter["id"].as_str().unwrap();

    // Not for keys without admin, nor without a key.
    problem(server.get_as("sg_ci_key", "/dead").await, 403).await;
    let refused = server
        .post_json_as("sg_ci_key", &format!("/dead/{id}/replay"), &json!({}))
        .await;
    problem(refused, 403).await;
    assert_eq!(server.get("/dead").await.status(), 401);

    broken.store(false, Ordering::SeqCst);
    let replayed = server
        .post_json_as("sg_ops_key", &format!("/dead/{id}/replay"), &json!({}))
        .await;
    assert_eq!(replayed.status(), 200);
    let body: Value = replayed.json().await.unwrap();
    assert_eq!(body["replayed"]["id"], json!(id));
    // The handler runs it again: a new run, recorded with the event that started it.
    let page = tokio::time::timeout(GUARD, async {
        loop {
            let page: Value = server
                .get_as("sg_ops_key", "/runs?door=event&status=ok")
                .await
                .json()
                .await
                .unwrap();
            if !page["runs"].as_array().unwrap().is_empty() {
                return page;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the replayed event is handled and recorded");
    let ok = page["runs"].as_array().unwrap();
    assert_eq!(ok.len(), 1, "{page}");
    let whole: Value = server
        .get_as(
            "sg_ops_key",
            &format!("/runs/{}", ok[0]["id"].as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["event"], json!(event.id));
    assert_eq!(whole["result"], "deployed");
    assert!(letters(&server).await.is_empty());
    let again = server
        .post_json_as("sg_ops_key", &format!("/dead/{id}/replay"), &json!({}))
        .await;
    problem(again, 404).await;
}
