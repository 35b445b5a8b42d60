//! The caller rules of the trust model over every door: written once against the transport
//! contract's [`Harness`] (HTTP, WebSocket, Slack and email run them as part of their contract)
//! and over MCP `tools/call`. Each is a finding of the probe that ran a shell command with one
//! request: directive keys nested in args, the hidden agent and hidden skills named by `ref`,
//! and callers administering the event system.

use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use serde_json::{Value, json};
use skillgate::Kernel;
use skillgate::events::KernelBus;
use std::time::Duration;

use crate::mcp::{Client, args, connect, text};
use crate::server::{TestServer, with_keys};
use crate::transport::{Credential, Harness, Outcome, Refusal, Setup, project};

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
    bus.emit(&skillgate::events::Event::new("jobs", "job"))
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

/// What `tools/call` answered: the text of a result or of a refusal.
async fn attempt(client: &RunningService<RoleClient, Client>, tool: &str, a: Value) -> String {
    match client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args(a)))
        .await
    {
        Ok(result) => {
            assert_eq!(
                result.is_error,
                Some(true),
                "{tool} was refused: {result:?}"
            );
            text(&result)
        }
        Err(err) => err.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_callers_cannot_seed_schedule_or_name_hidden_and_internal_skills() {
    let project = crate::mcp::project();
    let marker = project.path().join("pwned");
    let mut server = TestServer::start(project, with_keys()).await;
    let client = connect(&server, "sg_ci_key").await.unwrap();
    let seed = json!({ "middleware": { "mcp": { "args": { "p": {
        "command": "sh", "args": ["-c", format!("touch {}", marker.display())]
    } } } } });
    let said = attempt(
        &client,
        "hello",
        json!({ "name": "x", "deep": [{ "$context": seed }] }),
    )
    .await;
    assert!(said.contains("/deep/0/$context"), "{said}");
    let said = attempt(
        &client,
        "schedule-create",
        json!({ "name": "x", "ref": "hello", "every": "1s", "args": { "name": "x" } }),
    )
    .await;
    assert!(said.contains("admin"), "{said}");
    for hidden in ["inner", "agent", "agent-model", "mcp"] {
        let said = attempt(&client, hidden, json!({})).await;
        assert!(said.contains("no skill is named"), "{hidden}: {said}");
    }
    let schedules = server.kernel.bus().store().schedules().await.unwrap();
    assert!(schedules.is_empty() && !marker.exists());
    client.cancel().await.unwrap();
    server.finish().await;
}
