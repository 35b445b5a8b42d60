//! Schedules: `schedule-create` / `schedule-list` / `schedule-delete`, the missed-firing
//! policy, declared schedules at `serve` start, and two replicas on one Postgres firing a
//! one-second schedule once per second between them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillgate::events::KernelBus;
use skillgate::middleware::native;
use skillgate::schedule::runner::fire_due;
use skillgate::schedule::spec::Spec;
use skillgate::{ErrorKind, InvokeOptions, Kernel};

use crate::support::common::{Project, plain};
use crate::support::process::{Served, serve};
use crate::support::record::Record;
use crate::support::stores::Store;

/// A kernel with a `tick` skill that records the `schedule` it was fired for and its args.
fn ticking() -> (Kernel, Record) {
    let seen = Record::default();
    let kernel = {
        let seen = seen.clone();
        Project::new()
            .builder()
            .native(native("name: tick\n", move |ctx, args| {
                let seen = seen.clone();
                async move {
                    let schedule = ctx.get("nonlocals.schedule")?.unwrap_or(Value::Null);
                    seen.push(json!({ "schedule": schedule, "args": *args }));
                    Ok(None)
                }
            }))
            .build()
    };
    (kernel, seen)
}

async fn call(kernel: &Kernel, skill: &str, args: Value) -> skillgate::Result<Value> {
    kernel
        .invoke(skill, args, InvokeOptions::default())
        .await
        .map(|v| plain(v).unwrap_or(Value::Null))
}

#[tokio::test]
async fn schedule_create_list_and_delete_keep_schedules_in_the_store() {
    let (kernel, _) = ticking();
    let made = call(
        &kernel,
        "schedule-create",
        json!({ "name": "nightly", "ref": "tick", "cron": "30 2 * * *", "tz": "Europe/Paris", "args": { "full": true } }),
    )
    .await
    .unwrap();
    assert_eq!(made["changed"], true);
    assert_eq!(made["cron"], "30 2 * * *");
    // 02:30 in Paris is 00:30 or 01:30 UTC.
    let next = made["next"].as_str().unwrap();
    assert!(
        next.contains("T00:30:00") || next.contains("T01:30:00"),
        "{next}"
    );
    let again = call(
        &kernel,
        "schedule-create",
        json!({ "name": "nightly", "ref": "tick", "cron": "30 2 * * *", "tz": "Europe/Paris", "args": { "full": true } }),
    )
    .await
    .unwrap();
    assert_eq!(
        again["changed"], false,
        "the same schedule again changes nothing"
    );
    let listed = call(&kernel, "schedule-list", json!({})).await.unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["name"], "nightly");
    assert_eq!(listed[0]["ref"], "tick");
    assert_eq!(listed[0]["tz"], "Europe/Paris");
    assert_eq!(listed[0]["args"], json!({ "full": true }));
    assert_eq!(listed[0]["runs"], 0);
    assert_eq!(listed[0]["declared"], false);
    let deleted = call(&kernel, "schedule-delete", json!({ "name": "nightly" }))
        .await
        .unwrap();
    assert_eq!(deleted, json!({ "deleted": true }));
    assert_eq!(
        call(&kernel, "schedule-list", json!({})).await.unwrap(),
        json!([])
    );
}

#[tokio::test]
async fn schedule_create_refuses_a_missing_skill_a_bad_spec_and_names_the_field() {
    let (kernel, _) = ticking();
    let err = call(
        &kernel,
        "schedule-create",
        json!({ "name": "x", "ref": "tock", "every": "1s" }),
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("tock"), "{err}");
    let err = call(
        &kernel,
        "schedule-create",
        json!({ "name": "x", "ref": "tick", "cron": "99 * * * *" }),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs);
    assert!(
        err.message().contains("schedule `x`") && err.message().contains("cron"),
        "{err}"
    );
    let err = call(
        &kernel,
        "schedule-create",
        json!({ "name": "x", "ref": "tick", "every": "1s", "tz": "Nowhere/Else" }),
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("`tz`"), "{err}");
}

#[tokio::test]
async fn untrusted_code_may_not_create_schedules() {
    let project = Project::new();
    let kernel = project
        .builder()
        .native(native("name: tick\n", |_c, _a| async { Ok(None) }))
        .native(native("name: host\n", |ctx, _args| async move {
            let code = "try { await ctx.manager.invoke('schedule-create', { name: 'x', ref: 'tick', every: '1s' }); return 'created'; } catch (e) { return e.code; }";
            let out = skillgate::sandbox::run_untrusted(&ctx, code, None).await?;
            Ok(out)
        }))
        .build();
    let out = call(&kernel, "host", json!({})).await.unwrap();
    assert_eq!(out, "denied");
    let store = kernel.bus().store().clone();
    assert!(store.schedules().await.unwrap().is_empty());
    // The same call from trusted code creates it.
    call(
        &kernel,
        "schedule-create",
        json!({ "name": "x", "ref": "tick", "every": "1s" }),
    )
    .await
    .unwrap();
    assert_eq!(store.schedules().await.unwrap().len(), 1);
}

/// A schedule `name` for `tick` whose firing was due a minute ago.
async fn overdue(kernel: &Kernel, name: &str, missed: &str) {
    let now = skillgate::context::id::now_ms() as i64;
    let spec = Spec::parse(&json!({ "every": "10s", "missed": missed }), "tick", now).unwrap();
    kernel
        .bus()
        .store()
        .put_schedule(name, &spec.to_stored(), Some(now - 60_000))
        .await
        .unwrap();
}

#[tokio::test]
async fn firings_missed_while_down_run_once_or_are_skipped_as_the_schedule_says() {
    let (kernel, seen) = ticking();
    overdue(&kernel, "catch-up", "once").await;
    overdue(&kernel, "drop", "skip").await;
    let store = kernel.bus().store().clone();
    let before = skillgate::context::id::now_ms() as i64;
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 1);
    // Nothing is due now: a second pass takes nothing.
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 0);
    let runs = seen.at_least(1).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["schedule"]["name"], "catch-up");
    assert_eq!(runs[0]["schedule"]["missed"], true);
    for s in store.schedules().await.unwrap() {
        // Both go on from now, on their grid, whatever was missed.
        assert!(s.next_ms.unwrap() > before, "{s:?}");
        let expected_runs = if s.name == "catch-up" { 1 } else { 0 };
        assert_eq!(s.runs, expected_runs, "{s:?}");
    }
}

#[tokio::test]
async fn a_schedule_with_times_stops_after_its_last_run() {
    let (kernel, seen) = ticking();
    let store = kernel.bus().store().clone();
    let now = skillgate::context::id::now_ms() as i64;
    let spec = Spec::parse(
        &json!({ "every": "1s", "times": 2, "args": { "k": 1 } }),
        "tick",
        now,
    )
    .unwrap();
    store
        .put_schedule("twice", &spec.to_stored(), Some(now - 10))
        .await
        .unwrap();
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 1);
    let next = store.schedules().await.unwrap()[0].next_ms.unwrap();
    // Make the second firing due now rather than waiting for it.
    assert!(
        store
            .take_firing("twice", next, Some(now), false)
            .await
            .unwrap()
    );
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 1);
    let left = &store.schedules().await.unwrap()[0];
    assert_eq!((left.next_ms, left.runs), (None, 2));
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 0);
    let runs = seen.at_least(2).await;
    assert!(
        runs.iter().all(|r| r["args"] == json!({ "k": 1 })),
        "{runs:?}"
    );
    // Each firing is in the runs record, from the `schedule` door, with its stored args.
    let recorded = skillgate::contract::rules::recorded_runs(&kernel, "schedule", 2).await;
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    for run in &recorded {
        assert_eq!((run.skill.as_str(), run.status.as_str()), ("tick", "ok"));
        assert_eq!(run.args, r#"{"k":1}"#);
    }
}

#[tokio::test]
async fn a_schedule_whose_skill_is_gone_is_paused_shown_and_resumes_when_it_is_back() {
    let health = Arc::new(skillgate::schedule::health::ScheduleHealth::default());
    let (kernel, seen) = {
        let seen = Record::default();
        let kernel = Project::new().builder().extension(health.clone()).build();
        (kernel, seen)
    };
    let store = kernel.bus().store().clone();
    let now = skillgate::context::id::now_ms() as i64;
    let spec = Spec::parse(&json!({ "every": "10s" }), "gone", now).unwrap();
    store
        .put_schedule("orphan", &spec.to_stored(), Some(now - 10))
        .await
        .unwrap();
    // An unreadable one beside it is held too, not fired.
    store
        .put_schedule("garbled", "{ not json", Some(now - 10))
        .await
        .unwrap();
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 0);
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 0);
    let orphan = |all: Vec<skillgate::events::StoredSchedule>| {
        all.into_iter().find(|s| s.name == "orphan").unwrap()
    };
    // Not taken: still due, never run.
    let kept = orphan(store.schedules().await.unwrap());
    assert_eq!((kept.next_ms, kept.runs), (Some(now - 10), 0));
    assert_eq!(
        health.to_json(),
        json!({ "held": [
            { "name": "garbled", "reason": "its stored spec cannot be read; the cause is in the log" },
            { "name": "orphan", "reason": "skill `gone` not found: paused until it is back" },
        ] })
    );
    let listed = call(&kernel, "schedule-list", json!({})).await.unwrap();
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "orphan")
        .cloned()
        .unwrap();
    assert_eq!(
        entry["paused"],
        "skill `gone` not found: paused until it is back"
    );
    // The skill is back: the schedule fires and is no longer held.
    let ran = seen.clone();
    kernel
        .registry()
        .register(native("name: gone\n", move |_ctx, _args| {
            let ran = ran.clone();
            async move {
                ran.push(json!(true));
                Ok(None)
            }
        }));
    assert_eq!(fire_due(&kernel, &store).await.unwrap(), 1);
    assert_eq!(
        health.to_json()["held"],
        json!([{ "name": "garbled", "reason": "its stored spec cannot be read; the cause is in the log" }])
    );
    assert_eq!(seen.at_least(1).await.len(), 1);
}

/// The names of the stored schedules.
async fn stored_names(store: &Arc<dyn skillgate::events::EventStore>) -> Vec<String> {
    let mut names: Vec<String> = store
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn the_newest_release_declares_the_schedules_whatever_order_replicas_start_in() {
    use skillgate::events::memory::MemoryStore;
    use skillgate::events::{Bus, BusConfig, EventStore, Limits, WithBus};
    use skillgate::schedule::runner::sync_declared_as;
    let declaring = |skill: &str| {
        let project = Project::new();
        project.skill(
            &format!("{skill}.skill.md"),
            &format!("---\nname: {skill}\nmetadata:\n  schedule: \"@every 1h\"\n---\nrun\n"),
        );
        project
    };
    // The old release declares `legacy`; the new one dropped it for `report`.
    let (old, new) = (declaring("legacy"), declaring("report"));
    for new_first in [true, false] {
        let store: Arc<dyn EventStore> = Arc::new(MemoryStore::new(Limits::default()));
        let bus = Arc::new(Bus::new(store.clone(), BusConfig::default()));
        let old_kernel = old.builder().bus(bus.clone()).build();
        let new_kernel = new.builder().bus(bus.clone()).build();
        if new_first {
            sync_declared_as(&new_kernel, 2_000).await;
            sync_declared_as(&old_kernel, 1_000).await;
        } else {
            sync_declared_as(&old_kernel, 1_000).await;
            sync_declared_as(&new_kernel, 2_000).await;
        }
        assert_eq!(
            stored_names(&store).await,
            vec!["report".to_string()],
            "new release first: {new_first}"
        );
    }
}

#[tokio::test]
async fn a_new_release_with_the_same_declaration_keeps_the_next_firing_and_runs() {
    use skillgate::schedule::runner::sync_declared_as;
    let project = Project::new();
    project.skill(
        "report.skill.md",
        "---\nname: report\nmetadata:\n  schedule: { every: 1h, times: 5 }\n---\nrun\n",
    );
    let kernel = project.kernel();
    let store = kernel.bus().store().clone();
    sync_declared_as(&kernel, 1_000).await;
    let first = store.schedules().await.unwrap()[0].clone();
    // One run taken, then a new release with the same declaration starts.
    let next = first.next_ms.unwrap();
    assert!(
        store
            .take_firing("report", next, Some(next + 3_600_000), true)
            .await
            .unwrap()
    );
    sync_declared_as(&kernel, 2_000).await;
    let after = store.schedules().await.unwrap()[0].clone();
    assert_eq!((after.next_ms, after.runs), (Some(next + 3_600_000), 1));
    assert_eq!(Spec::from_stored(&after.spec).unwrap().release, Some(2_000));
}

/// A project whose `tick` skill emits `ticked` with the slot it was fired for and the replica
/// (`REPLICA`) it ran on; `declared` adds a schedule in its metadata.
fn tick_project(declared: &str) -> Project {
    let project = Project::new();
    project.skill(
        "tick.skill.js",
        &format!(
            "export const frontmatter = {{ name: 'tick', metadata: {{ {declared} }} }};\n\
             export default async (ctx, args) => {{\n\
               await ctx.manager.invoke('event-emit', {{ topic: 'ticked', data: {{ name: ctx.nonlocals.schedule.name, at: ctx.nonlocals.schedule.scheduledAt, replica: args.replica ?? null }} }});\n\
             }};\n"
        ),
    );
    project
}

/// Every `ticked` event so far, as (schedule name, slot).
fn ticks(project: &Project, store: &Store) -> Vec<(String, i64)> {
    let mut command = crate::support::common::skillgate_command(project.path());
    if let Some(url) = &store.url {
        command.args(["--store", url.as_str()]);
    }
    let out = command
        .args(["events", "replay", "ticked"])
        .output()
        .expect("skillgate events replay");
    assert!(
        out.status.success(),
        "{}",
        crate::support::common::stderr(&out)
    );
    crate::support::common::stdout(&out)
        .lines()
        .map(|line| {
            let e: Value = serde_json::from_str(line).unwrap();
            (
                e["data"]["name"].as_str().unwrap().to_string(),
                e["data"]["at"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn start(project: &Project, store: &Store) -> Served {
    let mut args = vec!["--bind", "127.0.0.1:0", "--watch", "false"];
    if let Some(url) = &store.url {
        args.extend(["--store", url.as_str()]);
    }
    let keys = format!("ops={};admin", skillgate::gateway::keys::hash_key(OPS_KEY));
    serve(
        project.path(),
        &args,
        &[("SKILLGATE_RATE_LIMIT", "0"), ("SKILLGATE_API_KEYS", &keys)],
    )
}

/// A key with the `admin` scope: schedules are the control plane.
const OPS_KEY: &str = "sg_ops_key";

#[test]
fn two_replicas_fire_a_one_second_schedule_ten_times_in_ten_seconds_not_twenty() {
    let Some(store) = Store::all().into_iter().find(|s| s.url.is_some()) else {
        return;
    };
    let project = tick_project("");
    let (a, b) = (start(&project, &store), start(&project, &store));
    let made: Value = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(a.post_as(
            Some(OPS_KEY),
            "/invoke/schedule-create",
            &json!({ "name": "every-second", "ref": "tick", "every": "1s", "times": 10 }),
        ))
        .1;
    assert_eq!(made["result"]["changed"], true, "{made}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = ticks(&project, &store);
    while seen.len() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        seen = ticks(&project, &store);
    }
    // One more second: a firing taken twice would show up now.
    std::thread::sleep(Duration::from_millis(1_500));
    let mut slots: Vec<i64> = ticks(&project, &store).into_iter().map(|t| t.1).collect();
    assert_eq!(slots.len(), 10, "ten runs in all: {slots:?}");
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 10, "each slot ran once");
    for pair in slots.windows(2) {
        assert_eq!(pair[1] - pair[0], 1_000, "one slot a second: {slots:?}");
    }
    drop((a, b));
}

#[test]
fn a_declared_schedule_fires_under_serve_and_keeps_its_grid_across_a_restart() {
    let store = Store::sqlite();
    let project = tick_project("schedule: '@every 1s'");
    let first = start(&project, &store);
    assert!(
        first.started.contains("1 declared schedule(s)"),
        "{}",
        first.started
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while ticks(&project, &store).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _) = first.stop();
    assert_eq!(code, Some(0));
    let before = ticks(&project, &store);
    assert!(before.len() >= 2, "{before:?}");
    let second = start(&project, &store);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ticks(&project, &store).len() < before.len() + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(second);
    let after = ticks(&project, &store);
    assert!(after.len() >= before.len() + 2, "{after:?}");
    // The restart kept the interval's grid: every slot is a whole number of seconds from the
    // first, and none ran twice.
    let first_slot = after[0].1;
    let mut slots: Vec<i64> = after.iter().map(|t| t.1).collect();
    assert!(
        slots.iter().all(|s| (s - first_slot) % 1_000 == 0),
        "{slots:?}"
    );
    assert!(after.iter().all(|t| t.0 == "tick"));
    let n = slots.len();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), n, "no slot twice");
}

#[test]
fn a_bad_declared_schedule_keeps_serve_from_starting_and_names_the_file() {
    let project = tick_project("schedule: { every: 'soon' }");
    let out = crate::support::common::skillgate_command(project.path())
        .args(["serve", "--bind", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = crate::support::common::stderr(&out);
    assert!(
        err.contains("tick.skill.js: metadata.schedule: `every`"),
        "{err}"
    );
}
