//! The kernel under hostile or careless input: invocation depth is bounded (through skills,
//! scripts and the event bus), handler runs have a timeout, per-run log settings cannot leak,
//! ids cannot be predicted, reserved topics are the system's, and caller mistakes are 4xx.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::events::memory::MemoryStore;
use skillgate::events::{Bus, BusConfig, Limits};
use skillgate::events::{KernelBus, WithBus};
use skillgate::{Context, InvokeOptions};

use crate::support::common::{Project, Trace, native};
use crate::support::server::{TestServer, config, problem};

/// Long enough for anything that should happen; only reached when something is broken.
const GUARD: Duration = Duration::from_secs(20);

fn looping() -> Project {
    let project = Project::new();
    project.skill(
        "again.skill.md",
        "---\nname: again\ndescription: Invokes itself.\n---\nonce more :skill[again]\n",
    );
    project.skill(
        "selfish.skill.js",
        "/*---\nname: selfish\ndescription: Invokes itself from JavaScript.\n---*/\nexport default async function (ctx) { return await ctx.manager.invoke('selfish', {}); }\n",
    );
    project
}

#[tokio::test]
async fn a_skill_invoking_itself_stops_at_the_depth_limit_with_the_chain_named() {
    let kernel = looping().builder().max_depth(16).build();
    let err = kernel
        .invoke("again", json!({}), InvokeOptions::default())
        .await
        .expect_err("an endless self-invocation fails");
    let message = err.message();
    assert!(
        message.contains("invocation depth limit of 16 reached"),
        "{message}"
    );
    assert!(
        message.contains("again ×17"),
        "the chain is named: {message}"
    );
    let data = err.data().expect("data");
    assert_eq!(data["maxDepth"], 16);
    assert_eq!(data["chain"][0], json!({ "skill": "again", "times": 17 }));
}

#[tokio::test]
async fn a_script_invoking_itself_stops_at_the_depth_limit() {
    let kernel = looping().builder().max_depth(12).build();
    let err = kernel
        .invoke("selfish", json!({}), InvokeOptions::default())
        .await
        .expect_err("an endless self-invocation fails");
    assert!(
        err.message().contains("depth limit of 12") && err.message().contains("selfish ×13"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn over_http_an_endless_self_invocation_fails_fast_and_the_server_answers_on() {
    let mut settings = config();
    settings.timeout = GUARD;
    let mut server = TestServer::start(looping(), settings).await;
    let response = server.post_json("/invoke/again", &json!({})).await;
    // A failure of the skill itself (not a timeout, 504): the default limit stopped it.
    problem(response, 500).await;
    assert_eq!(server.get("/healthz").await.status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn a_middleware_chain_does_not_count_as_depth() {
    // Each skill level runs a full pipeline of middleware; only skills count.
    let project = Project::new();
    project.skill(
        "leaf.skill.md",
        "---\nname: leaf\ndescription: Leaf.\n---\nleaf\n",
    );
    project.skill(
        "mid.skill.md",
        "---\nname: mid\ndescription: Mid.\n---\n:skill[leaf]\n",
    );
    let kernel = project.builder().max_depth(2).build();
    let out = kernel
        .invoke("mid", json!({}), InvokeOptions::default())
        .await
        .expect("two levels fit a limit of two");
    assert!(out.unwrap().as_str().unwrap().contains("leaf"));
}

/// A bus over a memory store with a short handler timeout and a small delivery limit.
fn bus(handler_timeout: Duration) -> Arc<Bus> {
    let limits = Limits {
        delivery_limit: 2,
        ..Limits::default()
    };
    let mut config = BusConfig::with_visibility(Duration::from_secs(30));
    config.handler_timeout = handler_timeout;
    Arc::new(Bus::new(Arc::new(MemoryStore::new(limits)), config))
}

#[tokio::test]
async fn a_handler_that_re_emits_to_its_own_topic_ends_at_the_depth_limit() {
    let bus = bus(GUARD);
    let runs = Trace::default();
    let seen = runs.clone();
    let handler = native(
        "name: ping-back\ndescription: Re-emits.\n",
        move |ctx: Context, args| {
            let seen = seen.clone();
            async move {
                seen.push(ctx.depth().to_string());
                let n = args["data"]["n"].as_u64().unwrap_or(0);
                ctx.invoke(
                    "event-emit",
                    json!({ "topic": "ping", "data": { "n": n + 1 } }),
                    InvokeOptions::default(),
                )
                .await?;
                Ok(None)
            }
        },
    );
    let kernel = Project::new()
        .builder()
        .bus(bus.clone())
        .native(handler)
        .max_depth(10)
        .build();
    bus.subscribe_handler(&kernel, "ping", "ping-back", None, false)
        .await
        .unwrap();
    kernel
        .invoke(
            "event-emit",
            json!({ "topic": "ping", "data": { "n": 0 } }),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    // The loop ends as a dead letter: the run at the limit fails on every delivery.
    let dead = bus
        .wait("ping.dead", "dead", GUARD, 10, true)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "the looping event ended as a dead letter");
    let depths = runs.take();
    assert!(
        !depths.is_empty() && depths.len() < 20,
        "a bounded number of handler runs: {depths:?}"
    );
    let deepest: u32 = depths
        .iter()
        .map(|d| d.parse::<u32>().unwrap())
        .max()
        .unwrap();
    assert!(deepest <= 10, "no handler ran past the limit: {depths:?}");
}

// Paused time: the handler's timeout passes without waiting for it (the memory store's own
// clock is not involved: a nacked event is visible again at once).
#[tokio::test(start_paused = true)]
async fn a_handler_run_past_its_timeout_is_stopped_and_its_event_delivered_again() {
    let bus = bus(Duration::from_secs(60));
    let starts = Trace::default();
    let seen = starts.clone();
    let handler = native(
        "name: stuck\ndescription: Never ends.\n",
        move |_ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.push("start");
                std::future::pending::<()>().await;
                Ok(None)
            }
        },
    );
    let kernel = Project::new()
        .builder()
        .bus(bus.clone())
        .native(handler)
        .build();
    bus.subscribe_handler(&kernel, "jobs", "stuck", None, false)
        .await
        .unwrap();
    kernel
        .invoke(
            "event-emit",
            json!({ "topic": "jobs" }),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    let dead = bus
        .wait("jobs.dead", "dead", Duration::from_secs(3600), 10, true)
        .await
        .unwrap();
    assert_eq!(
        dead.len(),
        1,
        "every run timed out, so the event ended dead"
    );
    assert_eq!(starts.take().len(), 2, "one run per delivery");
}

#[tokio::test]
async fn per_run_log_settings_are_dropped_when_a_run_is_cut_off() {
    let slow = native(
        "name: slow\ndescription: Configures its run's logs, then waits.\nmetadata:\n  log: { level: debug }\n",
        |_ctx, _args| async move {
            tokio::time::sleep(GUARD).await;
            Ok(None)
        },
    );
    let mut settings = config();
    settings.timeout = Duration::from_millis(200);
    let mut server = TestServer::start_with(Project::new(), settings, |b| b.native(slow)).await;
    for _ in 0..3 {
        let response = server.post_json("/invoke/slow", &json!({})).await;
        problem(response, 504).await;
    }
    let deadline = tokio::time::Instant::now() + GUARD;
    while server.kernel.logs().configured_runs() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.kernel.logs().configured_runs(), 0);
    server.finish().await;
}

/// splitmix64's finalizer undone: the ids of old were this finalizer over a counter.
fn unmix(mut z: u64) -> u64 {
    fn unshift(z: u64, s: u32) -> u64 {
        let mut x = z;
        for _ in 0..(64 / s) {
            x = z ^ (x >> s);
        }
        x
    }
    z = unshift(z, 31);
    z = z.wrapping_mul(0x3196_42b2_d24d_8ec3); // inverse of 0x94d049bb133111eb
    z = unshift(z, 27);
    z = z.wrapping_mul(0x96de_1b17_3f11_9089); // inverse of 0xbf58476d1ce4e5b9
    z = unshift(z, 30);
    z.wrapping_sub(0x9e37_79b9_7f4a_7c15)
}

#[test]
fn the_inverse_used_below_really_inverts_splitmix() {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    for n in [0, 1, 42, u64::MAX, 0xdead_beef] {
        assert_eq!(unmix(mix(n)), n);
    }
}

#[tokio::test]
async fn request_and_context_ids_cannot_be_predicted_from_earlier_ones() {
    let whoami = native(
        "name: whoami\ndescription: Root id.\n",
        |ctx: Context, _| async move { Ok(Some(Value::String(ctx.root_id()))) },
    );
    let mut server = TestServer::start_with(Project::new(), config(), |b| b.native(whoami)).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        let response = server.post_json("/invoke/whoami", &json!({})).await;
        let request = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_string();
        let body: Value = response.json().await.unwrap();
        let root = body["result"].as_str().unwrap().to_string();
        let parse = |s: &str| u64::from_str_radix(s, 16).unwrap();
        ids.push((parse(&request), parse(&root)));
    }
    // Undo the old mix: with a mixed counter, consecutive ids are a few steps apart.
    let steps: Vec<u64> = ids
        .windows(2)
        .map(|w| unmix(w[1].0).wrapping_sub(unmix(w[0].0)))
        .collect();
    assert!(
        steps.iter().any(|s| *s > 1 << 40),
        "request ids follow a counter: {steps:?}"
    );
    for (request, root) in &ids {
        assert_ne!(
            unmix(*root).wrapping_sub(unmix(*request)),
            1,
            "the root id is the request id's successor"
        );
    }
    server.finish().await;
}

#[tokio::test]
async fn reserved_topics_cannot_be_emitted_by_callers() {
    let mut server = TestServer::start(Project::new(), config()).await;
    for topic in ["shutdown", "gateway-message", "agent-start", "jobs.dead"] {
        let response = server
            .post_json("/invoke/event-emit", &json!({ "topic": topic }))
            .await;
        let body = problem(response, 403).await;
        assert!(
            body["detail"].as_str().unwrap().contains("reserved"),
            "{topic}: {body}"
        );
    }
    let response = server
        .post_json("/invoke/event-emit", &json!({ "topic": "jobs" }))
        .await;
    assert_eq!(response.status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn the_system_still_announces_shutdown_on_its_reserved_topic() {
    let kernel = Project::new().kernel();
    kernel
        .bus()
        .subscribe_queue("shutdown", "watch", false)
        .await
        .unwrap();
    skillgate::shutdown::announce_reason(&kernel, "test").await;
    let got = kernel
        .bus()
        .wait("shutdown", "watch", GUARD, 10, true)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event.data.as_ref().unwrap()["signal"], "test");
}

#[tokio::test]
async fn caller_mistakes_with_event_skills_are_422_not_500() {
    // `event-subscribe` is the control plane: an admin key's mistakes are 422 too.
    let mut server = TestServer::start(Project::new(), crate::support::server::with_keys()).await;
    let cases = [
        ("event-emit", json!({ "topic": "Not A Topic" })),
        (
            "event-wait",
            json!({ "topic": "jobs", "queue": "Bad Queue" }),
        ),
        ("event-wait", json!({ "topic": "jobs", "timeout": -5 })),
        (
            "event-subscribe",
            json!({ "topic": "jobs", "ref": "/etc/skills/x.skill.md" }),
        ),
    ];
    for (skill, args) in cases {
        let response = server
            .post_json_as("sg_ops_key", &format!("/invoke/{skill}"), &args)
            .await;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 422, "{skill} {args}: {body}");
    }
    server.finish().await;
}

#[tokio::test]
async fn overwriting_root_context_id_in_nonlocals_does_not_move_logs_or_events_to_another_run() {
    let spoofer = native(
        "name: spoofer\ndescription: Claims another run's id.\n",
        |ctx: Context, _| async move {
            let real = ctx.root_id();
            ctx.set("nonlocals.rootContextId", json!("00000000000000aa"))?;
            let logged = ctx.log(json!({ "text": "hi", "level": "error" }))?;
            let emitted = ctx
                .invoke(
                    "event-emit",
                    json!({ "topic": "jobs" }),
                    InvokeOptions::default(),
                )
                .await?
                .unwrap();
            Ok(Some(json!({
                "real": real,
                "log": logged["rootContextId"],
                "event": emitted["rootContextId"],
            })))
        },
    );
    let kernel = Project::new().builder().native(spoofer).build();
    let out = kernel
        .invoke("spoofer", json!({}), InvokeOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out["log"], out["real"], "{out}");
    assert_eq!(out["event"], out["real"], "{out}");
}

#[tokio::test]
async fn a_body_past_the_directive_cap_fails_naming_its_file_and_one_at_the_cap_expands() {
    let cap = skillgate::middleware::directives::MAX_DIRECTIVES;
    let project = Project::new();
    let body = |n: usize| vec![":arg[x]{default=y}"; n].join(" ");
    project.skill(
        "at-cap.skill.md",
        &format!(
            "---\nname: at-cap\ndescription: At the cap.\n---\n{}\n",
            body(cap)
        ),
    );
    project.skill(
        "past-cap.skill.md",
        &format!(
            "---\nname: past-cap\ndescription: Past it.\n---\n{}\n",
            body(cap + 1)
        ),
    );
    let kernel = project.builder().build();
    let expanded = kernel
        .invoke("at-cap", json!({}), InvokeOptions::default())
        .await
        .expect("a body at the cap expands");
    let text = expanded
        .as_deref()
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    assert_eq!(text.trim(), vec!["y"; cap].join(" "));
    let err = kernel
        .invoke("past-cap", json!({}), InvokeOptions::default())
        .await
        .expect_err("a body past the cap fails");
    let message = err.message();
    assert!(
        message.contains("past-cap.skill.md") && message.contains(&format!("{}", cap + 1)),
        "{message}"
    );
}
