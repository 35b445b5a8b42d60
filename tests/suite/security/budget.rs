//! Fan-out: depth bounds how deep a run goes, the run's budget how wide. A run that invokes
//! more skills, or passes more bytes, than its budget fails alone with `over-budget` (422 over
//! HTTP), while runs within it and other runs go on; handlers of the events a run emits spend
//! from the same budget while the run is alive. A script has a bounded number of invocations
//! running at once (the rest wait, counted against the budget when asked for), and once its
//! run is over budget the script is stopped, whatever it catches.

use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use skillgate::events::memory::MemoryStore;
use skillgate::events::{Bus, BusConfig, Limits, WithBus};
use skillgate::kernel::budget::BudgetLimits;
use skillgate::{Context, InvokeOptions, SkillError};

use crate::support::common::{Project, native};
use crate::support::server::{TestServer, config, problem};

fn fanout() -> Project {
    let p = Project::new();
    p.skill(
        "fanout.skill.js",
        "/*---\nname: fanout\ndescription: Invokes leaf n times at once.\n---*/\n\
         export default async function (ctx, args) {\n\
           const all = [];\n\
           for (let i = 0; i < args.n; i++) all.push(ctx.manager.invoke('leaf', { i, payload: args.payload ?? '' }));\n\
           return (await Promise.all(all)).length;\n\
         }\n",
    );
    p.skill(
        "leaf.skill.js",
        "/*---\nname: leaf\ndescription: Answers its number.\n---*/\nexport default async function (ctx, args) { return args.i; }\n",
    );
    p
}

fn small() -> BudgetLimits {
    BudgetLimits {
        invocations: 50,
        bytes: 64 * 1024,
        wall: Duration::from_secs(600),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_shaped_fan_out_past_the_budget_fails_that_run_only_as_over_budget() {
    let server = TestServer::start_with(fanout(), config(), |b| b.budget(small())).await;

    // Within the budget: the whole tree runs.
    let fine = server
        .post_json("/invoke/fanout", &json!({ "n": 20 }))
        .await;
    assert_eq!(fine.status(), 200);

    // Past the invocation count: 422, saying which limit and how to raise it.
    let wide = server
        .post_json("/invoke/fanout", &json!({ "n": 200 }))
        .await;
    let body = problem(wide, 422).await;
    assert_eq!(
        body["type"].as_str().map(|t| t.ends_with("over-budget")),
        Some(true),
        "{body}"
    );
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("50 skill invocations") && detail.contains("--max-run-invocations"),
        "{detail}"
    );

    // Past the bytes: a payload copied to each of 20 invocations.
    let heavy = server
        .post_json(
            "/invoke/fanout",
            &json!({ "n": 20, "payload": "x".repeat(8 * 1024) }),
        )
        .await;
    let body = problem(heavy, 422).await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("bytes of args and results"),
        "{body}"
    );

    // Each run has a budget of its own: the next one is served.
    let again = server
        .post_json("/invoke/fanout", &json!({ "n": 20 }))
        .await;
    assert_eq!(again.status(), 200);
}

#[tokio::test]
async fn handlers_of_the_events_a_run_emits_spend_from_its_budget_while_it_runs() {
    let limits = Limits {
        delivery_limit: 100,
        ..Limits::default()
    };
    let bus = Arc::new(Bus::new(
        Arc::new(MemoryStore::new(limits)),
        BusConfig::with_visibility(Duration::from_secs(30)),
    ));
    let handled = Arc::new(AtomicU64::new(0));
    // Wakes the spawner at the first handled event (a permit is kept if it is not waiting yet).
    let first = Arc::new(tokio::sync::Notify::new());
    let (counted, ran) = (handled.clone(), first.clone());
    let worker = native(
        "name: worker\ndescription: Counts.\n",
        move |_ctx: Context, _args| {
            let (counted, ran) = (counted.clone(), ran.clone());
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                ran.notify_one();
                Ok(None)
            }
        },
    );
    let seen = handled.clone();
    let report = Arc::new(parking_lot::Mutex::new((0u64, 0u64)));
    let told = report.clone();
    // Emits 8 events, then stays alive until a handler ran (and a little more).
    let spawner = native(
        "name: spawner\ndescription: Emits.\n",
        move |ctx: Context, _args| {
            let (seen, told, first) = (seen.clone(), told.clone(), first.clone());
            async move {
                let mut emitted = 0;
                for n in 0..8 {
                    let emit = json!({ "topic": "work", "data": { "n": n } });
                    if ctx
                        .invoke("event-emit", emit, InvokeOptions::default())
                        .await
                        .is_ok()
                    {
                        emitted += 1;
                    }
                }
                let _ = tokio::time::timeout(Duration::from_secs(20), first.notified()).await;
                // Alive a little longer: handlers that still ran on its budget would show now.
                tokio::time::sleep(Duration::from_millis(500)).await;
                *told.lock() = (emitted, seen.load(Ordering::SeqCst));
                Ok(Some(json!(emitted)))
            }
        },
    );
    let kernel = Project::new()
        .builder()
        .bus(bus.clone())
        .native(worker)
        .native(spawner)
        .budget(BudgetLimits {
            invocations: 10,
            ..small()
        })
        .build();
    bus.subscribe_handler(&kernel, "work", "worker", None, false)
        .await
        .unwrap();
    // The handlers spent the rest of the run's budget: the run itself is over it.
    let err = kernel
        .invoke("spawner", json!({}), InvokeOptions::default())
        .await
        .expect_err("the run's tree went over its budget");
    assert_eq!(err.data().unwrap()["limit"], "budget");
    let (emitted, handled) = *report.lock();
    // The spawner, its emits and the handlers that ran while it was alive: ten in all, so
    // most of the eight handlers had to wait for the run to end.
    assert_eq!(
        1 + emitted + handled,
        10,
        "emitted {emitted}, handled {handled}"
    );
    assert!(handled < 8, "handled {handled}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_runs_at_most_its_in_flight_invocations_at_once_and_the_rest_wait_their_turn() {
    let p = Project::new();
    p.skill(
        "wide.skill.js",
        "/*---\nname: wide\ndescription: Invokes slow n times at once.\n---*/\n\
         export default async function (ctx, args) {\n\
           const all = [];\n\
           for (let i = 0; i < args.n; i++) all.push(ctx.manager.invoke('slow', { i }));\n\
           return (await Promise.all(all)).reduce((a, b) => a + b, 0);\n\
         }\n",
    );
    let running = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    // Set once as many run at once as a script may have: until then each one waits, so the
    // slots fill up whatever the machine's speed.
    let (full, filled) = tokio::sync::watch::channel(false);
    let full = Arc::new(full);
    let slots = skillgate::sandbox::IN_FLIGHT as u64;
    let (now, most) = (running.clone(), peak.clone());
    let slow = native(
        "name: slow\ndescription: Waits for the slots to fill, counting who runs beside it.\n",
        move |_ctx: Context, args| {
            let (now, most, full, mut filled) =
                (now.clone(), most.clone(), full.clone(), filled.clone());
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                if n >= slots {
                    full.send_replace(true);
                }
                let waited = tokio::time::timeout(Duration::from_secs(20), filled.wait_for(|f| *f));
                let reached = matches!(waited.await, Ok(Ok(_)));
                // Holds its slot a moment more, so one started past the bound would overlap.
                tokio::time::sleep(Duration::from_millis(2)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                if !reached {
                    return Err(SkillError::failed(format!("never {slots} running at once")));
                }
                Ok(Some(args["i"].clone()))
            }
        },
    );
    let server = TestServer::start_with(p, config(), |b| b.native(slow)).await;
    let n = 3 * skillgate::sandbox::IN_FLIGHT as u64;
    let res = server.post_json("/invoke/wide", &json!({ "n": n })).await;
    assert_eq!(res.status(), 200);
    // Every one ran: none was refused for being past the slots.
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["result"], json!(n * (n - 1) / 2), "{body}");
    assert_eq!(
        peak.load(Ordering::SeqCst),
        slots,
        "invocations of one script running at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_refused_when_asked_for_costs_the_run_nothing() {
    let p = fanout();
    // Four times the budget of asks for a skill that is not there, then one real call.
    p.skill(
        "probe.skill.js",
        "/*---\nname: probe\ndescription: Looks for a skill, then uses another.\n---*/\n\
         export default async function (ctx) {\n\
           let missing = 0;\n\
           for (let i = 0; i < 200; i++) {\n\
             try { await ctx.manager.invoke('not-here', {}); } catch (e) { missing++; }\n\
           }\n\
           return { missing, leaf: await ctx.manager.invoke('leaf', { i: 7 }) };\n\
         }\n",
    );
    let server = TestServer::start_with(p, config(), |b| b.budget(small())).await;
    let res = server.post_json("/invoke/probe", &json!({})).await;
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(
        body["result"],
        json!({ "missing": 200, "leaf": 7 }),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_whose_run_went_over_its_budget_is_stopped_even_when_it_catches_the_error() {
    let p = fanout();
    // One asks in a loop that never yields; the other awaits each refusal and asks again.
    p.skill(
        "flood.skill.js",
        "/*---\nname: flood\ndescription: Never stops asking.\n---*/\n\
         export default async function (ctx) {\n\
           for (;;) ctx.manager.invoke('leaf', { i: 0 }).catch(() => {});\n\
         }\n",
    );
    p.skill(
        "stubborn.skill.js",
        "/*---\nname: stubborn\ndescription: Never takes no for an answer.\n---*/\n\
         export default async function (ctx) {\n\
           for (;;) { try { await ctx.manager.invoke('leaf', { i: 0 }); } catch (e) {} }\n\
         }\n",
    );
    let server = TestServer::start_with(p, config(), |b| b.budget(small())).await;
    for skill in ["flood", "stubborn"] {
        // Without the stop these spin until the sandbox's time limit ends them.
        let res = server
            .post_json(&format!("/invoke/{skill}"), &json!({}))
            .await;
        let body = problem(res, 422).await;
        assert_eq!(
            body["type"].as_str().map(|t| t.ends_with("over-budget")),
            Some(true),
            "{skill}: {body}"
        );
    }
}
