//! The rules of the contract, each an `async fn` generic over the [`Harness`]: the answers every
//! door gives alike, and the trust model's caller rules (directive keys anywhere in args, hidden
//! and internal skills named by `ref`, the control plane) that one request once broke.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Kernel;
use crate::contract::harness::GUARD;
use crate::contract::{Credential, Harness, Outcome, Part, Refusal, Setup, project};
use crate::events::KernelBus;
use crate::events::records::{RunFilter, StoredRun};

pub async fn invoke_returns_the_result<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let out = h
        .invoke("hello", json!({ "name": "Ada" }), Credential::Valid)
        .await;
    assert_eq!(out, Outcome::Ok(json!("Hello, Ada!\n")));
    h.shutdown().await;
}

/// The runs of `door` in the runs record, once `n` runs in all are written (a hang guard of
/// [`GUARD`]).
pub async fn recorded_runs(kernel: &Kernel, door: &str, n: u64) -> Vec<StoredRun> {
    let bus = kernel.bus();
    tokio::time::timeout(GUARD, bus.runs().settled_at_least(n))
        .await
        .expect("the runs are recorded");
    let filter = RunFilter {
        door: Some(door.to_string()),
        limit: 100,
        ..RunFilter::default()
    };
    bus.store().runs(&filter).await.expect("the record reads")
}

pub async fn every_run_is_recorded_with_the_doors_name_its_status_and_problem<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let ok = h
        .invoke("hello", json!({ "name": "Ada" }), Credential::Valid)
        .await;
    assert_eq!(ok, Outcome::Ok(json!("Hello, Ada!\n")));
    let failed = h.invoke("broken", json!({}), Credential::Valid).await;
    assert!(
        matches!(failed, Outcome::Refused(Refusal::Failed, _)),
        "{failed:?}"
    );
    let runs = recorded_runs(h.kernel(), H::NAME, 2).await;
    let of = |skill: &str| {
        let found: Vec<_> = runs.iter().filter(|r| r.skill == skill).collect();
        assert_eq!(
            found.len(),
            1,
            "one run of {skill} from {}: {runs:?}",
            H::NAME
        );
        found[0].clone()
    };
    let hello = of("hello");
    assert_eq!(
        (hello.status.as_str(), hello.problem.as_deref()),
        ("ok", None)
    );
    assert!(hello.args.contains("Ada"), "{hello:?}");
    let broken = of("broken");
    assert_eq!(
        (broken.status.as_str(), broken.problem.as_deref()),
        ("failed", Some("internal"))
    );
    assert!(broken.duration_us > 0, "{broken:?}");
    // A failed run keeps its chain's entries: the onion, with the failing skill's marked.
    let detail: Value = serde_json::from_str(&broken.detail).unwrap_or_default();
    let entries = detail["entries"].as_array().cloned().unwrap_or_default();
    assert!(
        entries
            .iter()
            .any(|e| e["skill"] == "broken" && e["ok"] == false),
        "the failed run's entries from {}: {detail}",
        H::NAME
    );
    assert_eq!(hello.principal, broken.principal);
    h.shutdown().await;
}

pub async fn streaming_delivers_parts_in_order_then_one_final_part<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let parts = h.stream("talk", json!({})).await;
    assert_eq!(
        parts,
        vec![
            Part::Message(json!("part 1")),
            Part::Message(json!("part 2")),
            Part::Final(Outcome::Ok(json!("done"))),
        ]
    );
    h.shutdown().await;
}

pub async fn a_skill_error_is_the_transports_error_form_with_no_internals<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let out = h.invoke("broken", json!({}), Credential::Valid).await;
    let Outcome::Refused(Refusal::Failed, text) = out else {
        panic!("a failure: {out:?}");
    };
    for secret in ["db-internal-7", "hunter2", "5432"] {
        assert!(!text.contains(secret), "`{secret}` leaked: {text}");
    }
    h.shutdown().await;
}

pub async fn invalid_args_are_refused_as_the_callers_mistake<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let out = h.invoke("hello", json!({}), Credential::Valid).await;
    assert!(
        matches!(out, Outcome::Refused(Refusal::InvalidArgs, _)),
        "{out:?}"
    );
    let out = h
        .invoke(
            "hello",
            json!({ "name": "x", "$context": { "run": { "middleware": {} } } }),
            Credential::Valid,
        )
        .await;
    let Outcome::Refused(Refusal::InvalidArgs, text) = out else {
        panic!("`$context` refused: {out:?}");
    };
    assert!(text.contains("$context"), "{text}");
    h.shutdown().await;
}

pub async fn a_missing_or_wrong_credential_is_refused<H: Harness>() {
    let h = H::start(
        project(),
        Setup {
            credentials: true,
            ..Setup::default()
        },
    )
    .await;
    for credential in [Credential::Missing, Credential::Wrong] {
        let out = h.invoke("hello", json!({ "name": "x" }), credential).await;
        assert!(
            matches!(out, Outcome::Refused(Refusal::Credential, _)),
            "{credential:?}: {out:?}"
        );
    }
    let out = h
        .invoke("hello", json!({ "name": "x" }), Credential::Valid)
        .await;
    assert_eq!(out, Outcome::Ok(json!("Hello, x!\n")));
    h.shutdown().await;
}

pub async fn hidden_and_middleware_skills_are_refused<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    for skill in ["vault", "wrap", "execute"] {
        let out = h.invoke(skill, json!({}), Credential::Valid).await;
        let Outcome::Refused(Refusal::NotFound, text) = out else {
            panic!("{skill} refused: {out:?}");
        };
        assert!(!text.contains("VAULT") && !text.contains("WRAP"), "{text}");
    }
    h.shutdown().await;
}

pub async fn nonlocals_request_and_gateway_are_filled<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let Outcome::Ok(seen) = h.invoke("where", json!({}), Credential::Valid).await else {
        panic!("where answers");
    };
    assert_eq!(seen["transport"], H::NAME);
    let id = seen["requestId"].as_str().expect("nonlocals.request.id");
    assert!(!id.is_empty());
    assert_eq!(seen["gatewayRequestId"], seen["requestId"]);
    h.shutdown().await;
}

pub async fn gateway_message_is_emitted_where_spec_03_says<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let bus = h.kernel().bus().clone();
    bus.subscribe_queue("gateway-message", "watch", false)
        .await
        .unwrap();
    let Outcome::Ok(seen) = h.invoke("where", json!({}), Credential::Valid).await else {
        panic!("where answers");
    };
    let wait = if H::ANNOUNCES {
        GUARD
    } else {
        Duration::from_millis(200)
    };
    let got = bus
        .wait("gateway-message", "watch", wait, 10, true)
        .await
        .unwrap();
    if H::ANNOUNCES {
        assert_eq!(got.len(), 1, "one gateway-message");
        assert_eq!(got[0].event.source.as_deref(), Some(H::NAME));
        assert_eq!(
            got[0].event.root_context_id.as_deref(),
            seen["root"].as_str()
        );
    } else {
        assert!(got.is_empty(), "{} does not announce: {got:?}", H::NAME);
    }
    h.shutdown().await;
}

pub async fn shutdown_drains_in_flight_work<H: Harness>() {
    let setup = Setup::default();
    let held = setup.held.clone();
    let mut h = H::start(project(), setup).await;
    let pending = h.start_invoke("held", json!({}));
    // Once the run is in flight, stop the transport, then let the run finish.
    tokio::time::timeout(GUARD, held.started.notified())
        .await
        .expect("the run started");
    h.begin_shutdown();
    held.release.notify_one();
    let (outcome, drained) = tokio::join!(
        tokio::time::timeout(GUARD, pending),
        tokio::time::timeout(GUARD, h.finish())
    );
    let outcome = outcome.expect("the in-flight run answered").unwrap();
    assert_eq!(outcome, Outcome::Ok(json!("released")));
    assert!(drained.expect("the shutdown ended"), "the shutdown drained");
}

/// The `$context` of the attack that ran a shell command: seeding the `mcp` middleware with a
/// command that would create `marker`.
fn spawn_seed(marker: &std::path::Path) -> Value {
    json!({ "middleware": { "mcp": { "args": { "p": {
        "command": "sh", "args": ["-c", format!("touch {}", marker.display())]
    } } } } })
}

/// Nothing was stored and nothing ran the marker command.
async fn nothing_stored_or_spawned(kernel: &Kernel, marker: &std::path::Path) {
    let schedules = kernel.bus().store().schedules().await.unwrap();
    assert!(schedules.is_empty(), "nothing was scheduled: {schedules:?}");
    assert!(!marker.exists(), "no process ran");
}

fn refused_as(out: &Outcome, kind: Refusal) -> &str {
    match out {
        Outcome::Refused(k, text) if *k == kind => text,
        other => panic!("refused as {kind:?}: {other:?}"),
    }
}

pub async fn directive_keys_anywhere_in_args_are_refused_and_nothing_is_spawned<H: Harness>() {
    let project = project();
    let marker = project.path().join("pwned");
    let h = H::start(project, Setup::default()).await;
    let seed = spawn_seed(&marker);
    let deep = json!({ "name": "x", "deep": { "list": [{ "$context": seed }] } });
    let out = h.invoke("hello", deep, Credential::Valid).await;
    assert!(
        refused_as(&out, Refusal::InvalidArgs).contains("$context"),
        "{out:?}"
    );
    // Through project code that passes the caller's args on to `schedule-create`.
    let relayed = json!({ "ref": "tick", "args": { "$context": seed } });
    let out = h.invoke("relay", relayed, Credential::Valid).await;
    assert!(
        refused_as(&out, Refusal::InvalidArgs).contains("$context"),
        "{out:?}"
    );
    // The attack as it was: `schedule-create` and `event-subscribe` by name are the control
    // plane, which a caller without `admin` may not run at all.
    let direct =
        json!({ "name": "x", "ref": "tick", "every": "1s", "times": 1, "args": { "q": 1 } });
    let out = h.invoke("schedule-create", direct, Credential::Valid).await;
    refused_as(&out, Refusal::Denied);
    let subscribe = json!({ "topic": "jobs", "ref": "tick" });
    let out = h
        .invoke("event-subscribe", subscribe, Credential::Valid)
        .await;
    refused_as(&out, Refusal::Denied);
    nothing_stored_or_spawned(h.kernel(), &marker).await;
    h.shutdown().await;
}

pub async fn hidden_internal_and_missing_refs_look_alike<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let mut texts = Vec::new();
    for reference in ["vault", "agent", "agent-model", "nope"] {
        let out = h
            .invoke("relay", json!({ "ref": reference }), Credential::Valid)
            .await;
        let text = refused_as(&out, Refusal::NotFound).replace(reference, "NAME");
        assert!(!text.contains("VAULT"), "{text}");
        texts.push(text);
    }
    for skill in ["agent", "agent-model"] {
        let out = h
            .invoke(
                skill,
                json!({ "prompt": "x", "config": { "base-url": "http://127.0.0.1:9" } }),
                Credential::Valid,
            )
            .await;
        refused_as(&out, Refusal::NotFound);
    }
    let out = h
        .invoke(
            "skill-describe",
            json!({ "name": "vault" }),
            Credential::Valid,
        )
        .await;
    refused_as(&out, Refusal::NotFound);
    let schedules = h.kernel().bus().store().schedules().await.unwrap();
    assert!(schedules.is_empty(), "{schedules:?}");
    h.shutdown().await;
}

pub async fn callers_do_not_administer_the_event_system<H: Harness>() {
    let h = H::start(project(), Setup::default()).await;
    let bus = h.kernel().bus().clone();
    // A worker's queue, with one delivery waiting.
    bus.subscribe_queue("jobs", "handler:tick", false)
        .await
        .unwrap();
    bus.emit(&crate::events::Event::new("jobs", "job"))
        .await
        .unwrap();
    for (skill, args) in [
        (
            "event-wait",
            json!({ "topic": "gateway-message", "timeout": 0 }),
        ),
        (
            "event-emit",
            json!({ "topic": "gateway-message", "data": {} }),
        ),
        ("event-unsubscribe", json!({ "topic": "jobs" })),
        ("schedule-delete", json!({ "name": "nightly" })),
        ("schedule-list", json!({})),
        (
            "web-send",
            json!({ "status": 302, "headers": { "location": "http://127.0.0.1:9/" } }),
        ),
    ] {
        let out = h.invoke(skill, args.clone(), Credential::Valid).await;
        refused_as(&out, Refusal::Denied);
    }
    // Naming the worker's queue names the caller's own queue of that name: empty (or, for a
    // principal with no topics, a refusal).
    let out = h
        .invoke(
            "event-wait",
            json!({ "topic": "jobs", "queue": "handler:tick", "timeout": 0 }),
            Credential::Valid,
        )
        .await;
    assert!(
        out == Outcome::Ok(json!([])) || matches!(out, Outcome::Refused(Refusal::Denied, _)),
        "{out:?}"
    );
    let kept = bus
        .wait("jobs", "handler:tick", Duration::ZERO, 10, false)
        .await
        .unwrap();
    assert_eq!(kept.len(), 1, "the worker's delivery is still there");
    h.shutdown().await;
}
