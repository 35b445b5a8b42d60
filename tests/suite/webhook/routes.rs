//! Signed webhooks over HTTP: a verified delivery is queued and answered 202, its skill runs
//! from the queue once (a replay is acknowledged with the first id and not run again), bad
//! signatures are 401 with nothing queued, and a failing skill is retried, then dead-lettered.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::Sha256;
use skillgate::contract::rules::recorded_runs;
use skillgate::events::memory::MemoryStore;
use skillgate::events::{Bus, BusConfig, KernelBus, Limits, WithBus};
use skillgate::gateway::keys::{ApiKey, KeyRing, hash_key};
use skillgate::gateway::webhook::routes::topic_for;
use skillgate::{Context, SkillError};
use tokio::sync::Notify;

use crate::support::common::{Project, native, runtime};
use crate::support::server::{TestServer, config, problem};

/// The routes read their secrets from this variable, which cargo and nextest set for every
/// test process (tests cannot set variables: the crate allows no `unsafe`).
const SECRET_ENV: &str = "CARGO_MANIFEST_DIR";

pub(crate) fn secret() -> String {
    std::env::var(SECRET_ENV).expect("cargo sets CARGO_MANIFEST_DIR for tests")
}

fn project() -> Project {
    let project = Project::new();
    project.write(
        "main.skill.md",
        &format!(
            "---\nname: main\ndescription: Hooks.\nmetadata:\n  role: main\n  webhook:\n    routes:\n      - {{ path: /hooks/std, secret: \"${{env.{SECRET_ENV}}}\", ref: record }}\n      - {{ path: /hooks/gh, secret: \"${{env.{SECRET_ENV}}}\", ref: record, scheme: github }}\n      - {{ path: /hooks/hmac, secret: \"${{env.{SECRET_ENV}}}\", ref: record, scheme: hmac, header: x-signature }}\n      - {{ path: /hooks/fail, secret: \"${{env.{SECRET_ENV}}}\", ref: failing }}\n---\nmain\n"
        ),
    );
    project
}

/// What `record` saw, and a signal per run.
#[derive(Clone, Default)]
pub(crate) struct Seen {
    pub(crate) runs: Arc<Mutex<Vec<Value>>>,
    ran: Arc<Notify>,
    failures: Arc<Mutex<u32>>,
}

pub(crate) async fn start(seen: &Seen, keys: bool) -> TestServer {
    let mut settings = config();
    if keys {
        settings.keys = KeyRing::new(vec![
            ApiKey::new("ci", &hash_key("sg_key"), vec![]).unwrap(),
        ])
        .unwrap();
    }
    let (runs, ran, failures) = (seen.runs.clone(), seen.ran.clone(), seen.failures.clone());
    // Failed deliveries come back quickly here, and twice is the limit.
    let store = Arc::new(MemoryStore::new(Limits {
        delivery_limit: 2,
        ..Limits::default()
    }));
    let bus = Arc::new(Bus::new(
        store,
        BusConfig::with_visibility(Duration::from_millis(200)),
    ));
    TestServer::start_with(project(), settings, move |b| {
        b.bus(bus)
            .native(native(
                "name: record\ndescription: Records a delivery.\n",
                move |ctx: Context, args| {
                    let (runs, ran) = (runs.clone(), ran.clone());
                    async move {
                        runs.lock().push(json!({
                            "args": *args,
                            "transport": ctx.get("nonlocals.request.transport")?,
                            "gateway": ctx.get("nonlocals.gateway.transport")?,
                        }));
                        ran.notify_one();
                        Ok(Some(json!("ok")))
                    }
                },
            ))
            .native(native(
                "name: failing\ndescription: Fails.\n",
                move |_ctx: Context, _| {
                    let failures = failures.clone();
                    async move {
                        *failures.lock() += 1;
                        Err(SkillError::failed("downstream is down"))
                    }
                },
            ))
    })
    .await
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn sign_standard(id: &str, ts: u64, body: &str) -> String {
    sign_standard_with(&secret(), id, ts, body)
}

/// The Standard Webhooks signature of delivery `id` at `ts` with `body`, signed with `secret`.
pub(crate) fn sign_standard_with(secret: &str, id: &str, ts: u64, body: &str) -> String {
    // A secret without `whsec_` is used as it is.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

async fn deliver(
    server: &TestServer,
    path: &str,
    id: &str,
    ts: u64,
    body: &str,
    signature: &str,
) -> reqwest::Response {
    server
        .client
        .post(server.url(path))
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

pub(crate) async fn wait_runs(seen: &Seen, count: usize) -> Vec<Value> {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let notified = seen.ran.notified();
            if seen.runs.lock().len() >= count {
                return seen.runs.lock().clone();
            }
            notified.await;
        }
    })
    .await
    .expect("the skill ran")
}

#[test]
fn a_signed_delivery_is_queued_answered_202_and_runs_its_skill_once_even_when_replayed() {
    runtime().block_on(async {
        let seen = Seen::default();
        // API keys are on: a webhook is authenticated by its signature instead.
        let server = start(&seen, true).await;
        let bus = server.kernel.bus().clone();
        bus.subscribe_queue("gateway-message", "watch", false)
            .await
            .unwrap();
        let body = r#"{"type":"invoice.paid","amount":42}"#;
        let ts = now();
        let signature = sign_standard("msg_1", ts, body);
        let first = deliver(&server, "/hooks/std", "msg_1", ts, body, &signature).await;
        assert_eq!(first.status(), 202);
        assert_eq!(
            first.json::<Value>().await.unwrap(),
            json!({ "deliveryId": "msg_1" })
        );
        let runs = wait_runs(&seen, 1).await;
        assert_eq!(
            runs[0]["args"]["body"],
            json!({ "type": "invoice.paid", "amount": 42 })
        );
        assert_eq!(runs[0]["args"]["id"], "msg_1");
        assert_eq!(runs[0]["transport"], "webhook");
        assert_eq!(runs[0]["gateway"], "webhook");
        let announced = bus
            .wait(
                "gateway-message",
                "watch",
                Duration::from_secs(20),
                10,
                true,
            )
            .await
            .unwrap();
        assert_eq!(announced[0].event.source.as_deref(), Some("webhook"));
        // The sender retries the same delivery: acknowledged with its id, not run again.
        let again = deliver(&server, "/hooks/std", "msg_1", ts, body, &signature).await;
        assert_eq!(again.status(), 200);
        assert_eq!(
            again.json::<Value>().await.unwrap(),
            json!({ "deliveryId": "msg_1", "duplicate": true })
        );
        let queued = server.queued(&topic_for("/hooks/std")).await;
        let ids: Vec<&Value> = queued.iter().map(|data| &data["deliveryId"]).collect();
        assert_eq!(ids, [&json!("msg_1")], "queued once");
        assert_eq!(seen.runs.lock().len(), 1, "ran once");
        // The run is in the runs record, as the route's principal.
        let recorded = recorded_runs(&server.kernel, "webhook", 1).await;
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        assert_eq!(recorded[0].principal, "webhook:/hooks/std");
        assert_eq!(
            (recorded[0].skill.as_str(), recorded[0].status.as_str()),
            ("record", "ok")
        );
    });
}

#[test]
fn a_bad_signature_a_stale_timestamp_or_missing_headers_are_401_and_nothing_is_queued() {
    runtime().block_on(async {
        let seen = Seen::default();
        let server = start(&seen, false).await;
        let body = r#"{"a":1}"#;
        let ts = now();
        let good = sign_standard("m", ts, body);
        let cases = [
            deliver(&server, "/hooks/std", "m", ts, r#"{"a":2}"#, &good).await,
            deliver(
                &server,
                "/hooks/std",
                "m",
                ts - 600,
                body,
                &sign_standard("m", ts - 600, body),
            )
            .await,
            deliver(&server, "/hooks/std", "m", ts, body, "v1,bm9wZQ==").await,
            server
                .client
                .post(server.url("/hooks/std"))
                .body(body)
                .send()
                .await
                .unwrap(),
        ];
        for response in cases {
            let problem = problem(response, 401).await;
            assert_eq!(problem["type"], "/docs#problem-bad-signature", "{problem}");
        }
        let queued = server
            .kernel
            .bus()
            .store()
            .peek("gateway-webhook.hooks.std", "run", 10)
            .await
            .unwrap();
        assert!(queued.is_empty(), "nothing queued: {queued:?}");
        assert!(seen.runs.lock().is_empty());
    });
}

#[test]
fn a_github_delivery_verifies_with_x_hub_signature_256() {
    runtime().block_on(async {
        let seen = Seen::default();
        let server = start(&seen, false).await;
        let body = r#"{"action":"opened"}"#;
        let mut mac = Hmac::<Sha256>::new_from_slice(secret().as_bytes()).unwrap();
        mac.update(body.as_bytes());
        let hex = skillgate::digest::hex(&mac.finalize().into_bytes());
        let response = server
            .client
            .post(server.url("/hooks/gh"))
            .header("x-hub-signature-256", format!("sha256={hex}"))
            .header("x-github-delivery", "gh-7")
            .header("x-github-event", "issues")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        let runs = wait_runs(&seen, 1).await;
        assert_eq!(runs[0]["args"]["id"], "gh-7");
        assert_eq!(runs[0]["args"]["headers"]["x-github-event"], "issues");
    });
}

#[test]
fn a_failing_skill_is_retried_from_the_queue_then_dead_lettered_while_the_sender_got_202() {
    runtime().block_on(async {
        let seen = Seen::default();
        let server = start(&seen, false).await;
        let body = r#"{"n":1}"#;
        let ts = now();
        let response = deliver(
            &server,
            "/hooks/fail",
            "f1",
            ts,
            body,
            &sign_standard("f1", ts, body),
        )
        .await;
        assert_eq!(response.status(), 202);
        let bus = server.kernel.bus().clone();
        let dead = bus
            .wait(
                "gateway-webhook.hooks.fail.dead",
                "dead",
                Duration::from_secs(20),
                1,
                true,
            )
            .await
            .unwrap();
        assert_eq!(dead.len(), 1, "dead-lettered");
        assert_eq!(
            dead[0].event.data.as_ref().unwrap()["event"]["data"]["deliveryId"],
            "f1"
        );
        assert_eq!(*seen.failures.lock(), 2, "tried up to the delivery limit");
        // Each try is a run of its own in the record, failed with its problem type.
        let recorded = recorded_runs(&server.kernel, "webhook", 2).await;
        assert_eq!(recorded.len(), 2, "{recorded:?}");
        for run in &recorded {
            assert_eq!(
                (run.status.as_str(), run.problem.as_deref()),
                ("failed", Some("internal"))
            );
        }
    });
}

#[test]
fn webhook_routes_with_a_literal_secret_an_unset_variable_a_missing_skill_or_a_pattern_path_do_not_start()
 {
    runtime().block_on(async {
        let project = Project::new();
        project.write(
            "main.skill.md",
            "---\nname: main\ndescription: Hooks.\nmetadata:\n  role: main\n  webhook:\n    routes:\n      - { path: /a, secret: plain-text, ref: main }\n      - { path: /b, secret: \"${env.SG_SURELY_UNSET_SECRET}\", ref: main }\n      - { path: /c, secret: \"${env.PATH}\", ref: mian }\n      - { path: \"/d[x]\", secret: \"${env.PATH}\", ref: main }\n---\nmain\n",
        );
        let kernel = project.builder().build();
        let gateway = skillgate::gateway::Gateway::new(
            kernel,
            Arc::new(skillgate::gateway::metrics::Metrics::new()),
        );
        let err = skillgate::server::Doors::bind(gateway, skillgate::server::DoorSettings::http(config()), project.path())
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("routes[0].secret: write it as a reference"), "{err}");
        assert!(err.contains("routes[1].secret: the environment variable `SG_SURELY_UNSET_SECRET`"), "{err}");
        assert!(err.contains("routes[2].ref: no skill named `mian` (did you mean `main`?)"), "{err}");
        assert!(err.contains("routes[3].path: `/d[x]` must be a plain path"), "{err}");
        assert!(!err.contains("plain-text"), "the secret is not printed: {err}");
    });
}

#[test]
fn a_signed_body_holding_a_directive_key_is_refused_422_naming_its_path_and_never_queued() {
    runtime().block_on(async {
        let seen = Seen::default();
        let mut server = start(&seen, false).await;
        let body = r#"{"type":"x","items":[{"$context":{"middleware":{}}}]}"#;
        let ts = now();
        let signature = sign_standard("msg_dollar", ts, body);
        let refused = deliver(&server, "/hooks/std", "msg_dollar", ts, body, &signature).await;
        assert_eq!(refused.status(), 422);
        let problem: Value = refused.json().await.unwrap();
        assert_eq!(
            problem["errors"][0]["path"], "/items/0/$context",
            "{problem}"
        );
        let queued = server
            .kernel
            .bus()
            .store()
            .peek("gateway-webhook.hooks.std", "run", 10)
            .await
            .unwrap_or_default();
        assert!(queued.is_empty(), "{queued:?}");
        assert!(seen.runs.lock().is_empty());
        server.finish().await;
    });
}

#[test]
fn a_delivery_queued_by_the_release_before_versioned_payloads_still_runs() {
    runtime().block_on(async {
        let seen = Seen::default();
        let mut server = start(&seen, false).await;
        // The shape the intake queued before payloads carried a version: no `v`.
        let topic = skillgate::gateway::webhook::routes::topic_for("/hooks/std");
        let mut event = skillgate::events::Event::new(&topic, "delivery");
        event.source = Some("webhook".into());
        event.data = Some(json!({
            "deliveryId": "msg_old",
            "path": "/hooks/std",
            "scheme": "standard-webhooks",
            "headers": { "webhook-id": "msg_old" },
            "body": { "queued": "before the upgrade" },
            "receivedAt": 1_700_000_000_000u64,
        }));
        server.kernel.bus().emit(&event).await.unwrap();
        let runs = wait_runs(&seen, 1).await;
        assert_eq!(runs[0]["args"]["id"], "msg_old");
        assert_eq!(
            runs[0]["args"]["body"],
            json!({ "queued": "before the upgrade" })
        );
        assert_eq!(runs[0]["args"]["headers"]["webhook-id"], "msg_old");
        server.finish().await;
    });
}
