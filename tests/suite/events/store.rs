//! The event store contract: one suite, run unchanged against the memory, SQLite and Postgres
//! stores (Postgres through `DATABASE_URL`, which `scripts/test` provides with a throwaway
//! cluster; each test gets its own schema).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use skillgate::events::WithBus;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::{Bus, EventStore, Limits, dead};
use skillgate::{ErrorKind, InvokeOptions, Kernel};

use crate::support::common::{Project, event, native, plain};
use crate::support::record::Record;
use crate::support::stores::Backend;

/// Generous bound on waits that only end if a rule holds (a hang guard, not a timing check).
const GUARD: Duration = Duration::from_secs(30);

macro_rules! contract {
    ($($rule:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $rule() {
                if let Some(b) = super::Backend::memory() { super::$rule(&b).await; b.cleanup().await; }
            })*
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $rule() {
                if let Some(b) = super::Backend::sqlite() { super::$rule(&b).await; b.cleanup().await; }
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $rule() {
                if let Some(b) = super::Backend::postgres() { super::$rule(&b).await; b.cleanup().await; }
            })*
        }
    };
}

contract!(
    emit_then_wait_delivers_the_full_envelope,
    wait_drains_what_is_there_at_once_in_emit_order,
    wait_with_nothing_times_out_empty,
    wait_wakes_when_an_event_arrives,
    a_consumer_group_delivers_each_event_to_one_consumer,
    separate_queues_each_get_every_event,
    replay_starts_a_new_queue_with_the_buffered_events,
    subscribing_an_existing_queue_is_a_no_op,
    an_unacked_event_comes_back_after_its_visibility_timeout,
    an_acked_event_never_comes_back,
    nack_returns_the_event_to_the_front,
    the_delivery_limit_moves_an_event_to_the_dead_topic,
    dead_letters_of_every_topic_are_listed_and_one_replays_into_the_queue_it_died_in,
    the_replay_buffer_is_bounded_by_count,
    the_replay_buffer_is_bounded_by_age,
    a_committed_emit_is_visible_to_another_store_on_the_same_data,
    acking_an_unknown_id_is_an_error_naming_it,
    an_invalid_topic_is_refused,
    a_skill_handler_gets_each_event_and_a_failing_one_is_retried_then_dead,
    emit_returns_before_a_ref_handler_finishes,
    event_skills_work_through_the_pipeline,
    the_event_middleware_routes_topics_to_skills,
    event_unsubscribe_removes_one_handler_a_queue_or_every_handler,
    a_kept_subscription_is_restored_after_a_restart_for_its_principal_with_its_args,
    a_schedule_firing_is_taken_once_and_an_unchanged_put_keeps_it,
    a_session_keeps_its_newest_entries_in_order_and_clears,
    the_session_middleware_continues_a_conversation_across_replicas,
    follow_resumes_after_an_id_with_no_gap_and_no_duplicate,
    follow_sees_events_another_process_emits,
    follow_from_an_id_that_left_the_buffer_starts_at_the_oldest_and_says_so,
    follow_keeps_buffer_order_while_two_writers_emit_at_once,
    a_key_is_claimed_once_and_replays_what_its_holder_answered,
    an_expired_claim_is_free_again,
    of_many_processes_claiming_one_key_at_once_one_wins,
    a_claimed_emit_stores_its_events_only_when_it_wins_the_key_with_its_answer_in_the_same_commit,
    of_many_processes_queueing_under_one_key_at_once_one_queues_and_the_rest_are_told_its_answer,
    two_events_sharing_an_id_are_acked_independently_by_receipt,
    emit_many_stores_a_batch_in_order_in_every_queue,
    nacking_several_puts_them_at_the_front_in_the_order_given,
    a_consumer_hands_out_each_entry_once_and_its_acks_remove_them,
    closing_a_consumer_returns_what_it_prefetched_to_the_front,
    a_prefetched_entry_whose_claim_grew_old_is_returned_not_handed_out,
);

fn ns(deliveries: &[skillgate::events::Delivery]) -> Vec<u64> {
    deliveries
        .iter()
        .map(|d| {
            d.event
                .data
                .as_ref()
                .and_then(|v| v["n"].as_u64())
                .expect("n")
        })
        .collect()
}

const LONG: Duration = Duration::from_secs(60);

async fn emit_then_wait_delivers_the_full_envelope(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("orders", "q", false).await.unwrap();
    let mut sent = event("orders", 1);
    sent.root_context_id = Some("root-1".into());
    bus.emit(&sent).await.unwrap();
    let got = bus.wait("orders", "q", GUARD, 10, true).await.unwrap();
    assert_eq!(got.len(), 1);
    let e = &got[0].event;
    assert_eq!(e, &sent);
    assert_eq!(e.id.len(), 16);
    assert!(e.id.bytes().all(|c| c.is_ascii_hexdigit()));
    let json = e.to_json();
    for key in [
        "id",
        "topic",
        "type",
        "source",
        "data",
        "timestamp",
        "rootContextId",
    ] {
        assert!(json.get(key).is_some(), "envelope lacks {key}: {json}");
    }
}

async fn wait_drains_what_is_there_at_once_in_emit_order(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("t", "q", false).await.unwrap();
    for n in 1..=5 {
        bus.emit(&event("t", n)).await.unwrap();
    }
    let got = bus.wait("t", "q", GUARD, 100, true).await.unwrap();
    assert_eq!(ns(&got), [1, 2, 3, 4, 5]);
}

async fn wait_with_nothing_times_out_empty(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    let got = bus
        .wait("quiet", "q", Duration::from_millis(50), 10, true)
        .await
        .unwrap();
    assert!(got.is_empty());
}

async fn wait_wakes_when_an_event_arrives(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("t", "q", false).await.unwrap();
    let kernel = Project::new().builder().bus(bus.clone()).build();
    // The `event-wait` skill, waiting up to an hour: only the event can end it within the
    // guard.
    let waiter = tokio::spawn(async move {
        kernel
            .invoke(
                "event-wait",
                json!({"topic": "t", "queue": "q", "timeout": 3_600_000}),
                InvokeOptions::default(),
            )
            .await
            .map(plain)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "the wait returned with nothing there"
    );
    bus.emit(&event("t", 7)).await.unwrap();
    let got = tokio::time::timeout(GUARD, waiter)
        .await
        .expect("event-wait woke when the event arrived, long before its timeout")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got[0]["data"]["n"], 7, "{got}");
    bus.shutdown();
}

async fn a_consumer_group_delivers_each_event_to_one_consumer(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("work", "group", false).await.unwrap();
    let total = 40u64;
    for n in 0..total {
        bus.emit(&event("work", n)).await.unwrap();
    }
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let bus = bus.clone();
        consumers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = bus
                    .wait("work", "group", Duration::from_millis(200), 3, true)
                    .await
                    .unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(ns(&got));
            }
        }));
    }
    let mut all = Vec::new();
    for c in consumers {
        all.extend(c.await.unwrap());
    }
    all.sort();
    assert_eq!(
        all,
        (0..total).collect::<Vec<_>>(),
        "each event exactly once"
    );
}

async fn separate_queues_each_get_every_event(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("fan", "a", false).await.unwrap();
    bus.subscribe_queue("fan", "b", false).await.unwrap();
    for n in 1..=3 {
        bus.emit(&event("fan", n)).await.unwrap();
    }
    assert_eq!(
        ns(&bus.wait("fan", "a", GUARD, 10, true).await.unwrap()),
        [1, 2, 3]
    );
    assert_eq!(
        ns(&bus.wait("fan", "b", GUARD, 10, true).await.unwrap()),
        [1, 2, 3]
    );
}

async fn replay_starts_a_new_queue_with_the_buffered_events(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    for n in 1..=3 {
        bus.emit(&event("hist", n)).await.unwrap();
    }
    bus.subscribe_queue("hist", "late", true).await.unwrap();
    bus.subscribe_queue("hist", "fresh", false).await.unwrap();
    bus.emit(&event("hist", 4)).await.unwrap();
    assert_eq!(
        ns(&bus.wait("hist", "late", GUARD, 10, true).await.unwrap()),
        [1, 2, 3, 4]
    );
    assert_eq!(
        ns(&bus.wait("hist", "fresh", GUARD, 10, true).await.unwrap()),
        [4]
    );
}

async fn subscribing_an_existing_queue_is_a_no_op(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.emit(&event("idem", 1)).await.unwrap();
    assert!(bus.subscribe_queue("idem", "q", true).await.unwrap());
    assert!(!bus.subscribe_queue("idem", "q", true).await.unwrap());
    assert_eq!(
        ns(&bus.wait("idem", "q", GUARD, 10, true).await.unwrap()),
        [1],
        "no duplicate replay"
    );
}

async fn an_unacked_event_comes_back_after_its_visibility_timeout(b: &Backend) {
    let bus = b.bus(Limits::default(), Duration::from_millis(300)).await;
    bus.subscribe_queue("vt", "q", false).await.unwrap();
    bus.emit(&event("vt", 1)).await.unwrap();
    let first = bus.wait("vt", "q", GUARD, 10, false).await.unwrap();
    assert_eq!((ns(&first), first[0].attempts), (vec![1], 1));
    let hidden = bus
        .wait("vt", "q", Duration::ZERO, 10, false)
        .await
        .unwrap();
    assert!(hidden.is_empty(), "in flight entries are invisible");
    let again = bus.wait("vt", "q", GUARD, 10, false).await.unwrap();
    assert_eq!((ns(&again), again[0].attempts), (vec![1], 2));
}

async fn an_acked_event_never_comes_back(b: &Backend) {
    let bus = b.bus(Limits::default(), Duration::from_millis(100)).await;
    bus.subscribe_queue("done", "q", false).await.unwrap();
    bus.emit(&event("done", 1)).await.unwrap();
    let got = bus.wait("done", "q", GUARD, 10, false).await.unwrap();
    bus.ack("done", "q", &[got[0].receipt], false)
        .await
        .unwrap();
    let later = bus
        .wait("done", "q", Duration::from_millis(400), 10, false)
        .await
        .unwrap();
    assert!(later.is_empty(), "acked entry came back: {:?}", ns(&later));
}

async fn nack_returns_the_event_to_the_front(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("nk", "q", false).await.unwrap();
    for n in 1..=4 {
        bus.emit(&event("nk", n)).await.unwrap();
    }
    let first = bus.wait("nk", "q", GUARD, 3, false).await.unwrap();
    assert_eq!(ns(&first), [1, 2, 3]);
    // 1 goes back first, then 3: at the front 3 comes before 1; at its old place it would
    // come after.
    bus.ack("nk", "q", &[first[0].receipt], true).await.unwrap();
    bus.ack("nk", "q", &[first[2].receipt], true).await.unwrap();
    let next = bus.wait("nk", "q", GUARD, 10, true).await.unwrap();
    assert_eq!(
        ns(&next),
        [3, 1, 4],
        "the last nacked is first, then the one nacked before; 2 is still in flight"
    );
}

async fn the_delivery_limit_moves_an_event_to_the_dead_topic(b: &Backend) {
    let limits = Limits {
        delivery_limit: 2,
        ..Limits::default()
    };
    let bus = b.bus(limits, LONG).await;
    bus.subscribe_queue("jobs", "q", false).await.unwrap();
    bus.emit(&event("jobs", 9)).await.unwrap();
    for attempt in 1..=2 {
        let got = bus.wait("jobs", "q", GUARD, 1, false).await.unwrap();
        assert_eq!(got[0].attempts, attempt);
        bus.ack("jobs", "q", &[got[0].receipt], true).await.unwrap();
    }
    let after = bus
        .wait("jobs", "q", Duration::from_millis(50), 1, false)
        .await
        .unwrap();
    assert!(after.is_empty(), "exhausted entry delivered a third time");
    let dead = bus
        .wait("jobs.dead", "dead", GUARD, 10, true)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let letter = &dead[0].event;
    assert_eq!(letter.kind, "dead-letter");
    let data = letter.data.clone().unwrap_or(Value::Null);
    assert_eq!(data["event"]["data"]["n"], 9);
    assert_eq!(data["queue"], "q");
    assert_eq!(data["attempts"], 2);
}

async fn dead_letters_of_every_topic_are_listed_and_one_replays_into_the_queue_it_died_in(
    b: &Backend,
) {
    let limits = Limits {
        delivery_limit: 1,
        ..Limits::default()
    };
    let bus = b.bus(limits, LONG).await;
    for (topic, queue, n) in [("mail", "m", 5), ("jobs", "q", 9)] {
        bus.subscribe_queue(topic, queue, false).await.unwrap();
        bus.emit(&event(topic, n)).await.unwrap();
        let got = bus.wait(topic, queue, GUARD, 1, false).await.unwrap();
        bus.ack(topic, queue, &[got[0].receipt], true)
            .await
            .unwrap();
        // Claimed past its limit, it moves to `<topic>.dead`.
        let after = bus
            .wait(topic, queue, Duration::from_millis(50), 1, false)
            .await
            .unwrap();
        assert!(after.is_empty());
    }
    let letters = dead::list(bus.store(), 10).await.unwrap();
    let seen: Vec<_> = letters
        .iter()
        .map(|l| {
            (
                l.topic.as_str(),
                l.queue.as_str(),
                l.attempts,
                l.event["data"]["n"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("jobs", "q", 1, json!(9)), ("mail", "m", 1, json!(5))]
    );
    assert_eq!(dead::list(bus.store(), 1).await.unwrap().len(), 1);
    let replayed = dead::replay(bus.store(), &letters[0].id).await.unwrap();
    assert_eq!(replayed.event, letters[0].event);
    let left = dead::list(bus.store(), 10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].topic, "mail");
    // Back in its queue as a fresh entry, its deliveries counted from one again.
    let again = bus.wait("jobs", "q", GUARD, 1, false).await.unwrap();
    assert_eq!(again[0].event.data.as_ref().unwrap()["n"], 9);
    assert_eq!(again[0].attempts, 1);
    let missing = dead::replay(bus.store(), &letters[0].id).await.unwrap_err();
    assert!(
        matches!(missing, dead::ReplayError::Missing(_)),
        "{missing}"
    );
}

async fn the_replay_buffer_is_bounded_by_count(b: &Backend) {
    let limits = Limits {
        buffer_events: 3,
        ..Limits::default()
    };
    let bus = b.bus(limits, LONG).await;
    for n in 1..=6 {
        bus.emit(&event("cap", n)).await.unwrap();
    }
    let kept = bus.store().buffered("cap", None, 100).await.unwrap();
    let kept: Vec<u64> = kept
        .iter()
        .map(|e| e.data.as_ref().unwrap()["n"].as_u64().unwrap())
        .collect();
    assert_eq!(kept, [4, 5, 6]);
}

async fn the_replay_buffer_is_bounded_by_age(b: &Backend) {
    let limits = Limits {
        buffer_age: Duration::from_secs(60),
        ..Limits::default()
    };
    let bus = b.bus(limits, LONG).await;
    let mut old = event("aged", 1);
    old.timestamp -= 120_000;
    bus.emit(&old).await.unwrap();
    bus.emit(&event("aged", 2)).await.unwrap();
    let kept = bus.store().buffered("aged", None, 100).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].data.as_ref().unwrap()["n"], 2);
}

async fn a_committed_emit_is_visible_to_another_store_on_the_same_data(b: &Backend) {
    let writer = b.open(Limits::default()).await;
    writer.create_queue("dur", "q", false).await.unwrap();
    writer.emit(&event("dur", 5)).await.unwrap();
    let reader = b.open(Limits::default()).await;
    let got = reader.claim("dur", "q", 10, LONG).await.unwrap();
    assert_eq!(ns(&got), [5]);
}

async fn acking_an_unknown_id_is_an_error_naming_it(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("ack", "q", false).await.unwrap();
    let err = bus
        .ack_ids("ack", "q", &["deadbeef".into()], false)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs);
    assert!(err.to_string().contains("`deadbeef`"), "{err}");
    let err = bus.ack("ack", "q", &[987_654], false).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs);
    assert!(err.to_string().contains("`987654`"), "{err}");
}

async fn an_invalid_topic_is_refused(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    for bad in ["", "Has Caps", "spaces here", "-lead", &"x".repeat(201)] {
        let err = bus.emit(&event(bad, 1)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgs, "{bad:?}");
        assert!(err.to_string().contains("invalid topic"), "{err}");
    }
}

async fn a_skill_handler_gets_each_event_and_a_failing_one_is_retried_then_dead(b: &Backend) {
    let limits = Limits {
        delivery_limit: 3,
        ..Limits::default()
    };
    let bus = b.bus(limits, LONG).await;
    let seen = Record::default();
    let s = seen.clone();
    let p = Project::new();
    let kernel = p
        .builder()
        .bus(bus.clone())
        .native(native("name: on-job\n", move |_ctx, args| {
            let s = s.clone();
            async move {
                let n = args["data"]["n"].as_u64().unwrap_or_default();
                s.push(json!(n));
                if n == 13 {
                    return Err(skillgate::SkillError::failed("unlucky"));
                }
                Ok(None)
            }
        }))
        .build();
    bus.subscribe_handler(&kernel, "jobs", "on-job", None, false)
        .await
        .unwrap();
    assert!(
        !bus.subscribe_handler(&kernel, "jobs", "on-job", None, false)
            .await
            .unwrap()
    );
    for n in [1, 13, 2] {
        bus.emit(&event("jobs", n)).await.unwrap();
    }
    let dead = bus
        .wait("jobs.dead", "dead", GUARD, 10, true)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].event.data.as_ref().unwrap()["event"]["data"]["n"],
        13
    );
    let seen = seen
        .until(|ran| ran.iter().filter(|n| **n != 13).count() >= 2)
        .await;
    let runs_of = |n: u64| seen.iter().filter(|m| **m == n).count();
    assert_eq!(runs_of(13), 3, "three deliveries: {seen:?}");
    assert_eq!(runs_of(1), 1, "{seen:?}");
    assert_eq!(runs_of(2), 1, "{seen:?}");
    bus.shutdown();
}

/// Spec 03: emitting to a topic a skill handles returns once the event is stored, not once the
/// handler is done: the handler here is still waiting when `emit` has returned.
async fn emit_returns_before_a_ref_handler_finishes(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = Arc::new(Mutex::new(Some(started_tx)));
    let release = Arc::new(tokio::sync::Notify::new());
    let finished = Record::default();
    let p = Project::new();
    let kernel = {
        let (release, finished) = (release.clone(), finished.clone());
        p.builder()
            .bus(bus.clone())
            .native(native("name: slow-handler\n", move |_ctx, _args| {
                let (started, release, finished) =
                    (started_tx.clone(), release.clone(), finished.clone());
                async move {
                    if let Some(tx) = started.lock().take() {
                        let _ = tx.send(());
                    }
                    release.notified().await;
                    finished.push(json!("finished"));
                    Ok(None)
                }
            }))
            .build()
    };
    bus.subscribe_handler(&kernel, "slow", "slow-handler", None, false)
        .await
        .unwrap();
    kernel
        .invoke(
            "event-emit",
            json!({ "topic": "slow", "data": { "n": 1 } }),
            InvokeOptions::default(),
        )
        .await
        .expect("emit returns while the handler waits");
    assert!(finished.all().is_empty(), "emit waited for the handler");
    // The handler does run (and, released, finishes).
    tokio::time::timeout(GUARD, started_rx)
        .await
        .expect("the handler started")
        .unwrap();
    release.notify_one();
    finished.at_least(1).await;
    bus.shutdown();
}

async fn event_skills_work_through_the_pipeline(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    let p = Project::new();
    let kernel: Kernel = p.builder().bus(bus).build();
    let call = |tool: &'static str, args: Value| {
        let kernel = kernel.clone();
        async move {
            kernel
                .invoke(tool, args, InvokeOptions::default())
                .await
                .map(plain)
        }
    };
    call("event-subscribe", json!({"topic": "sk", "queue": "q"}))
        .await
        .unwrap();
    let sent = call(
        "event-emit",
        json!({"topic": "sk", "type": "ping", "data": {"a": 1}}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(sent["type"], "ping");
    assert!(sent["rootContextId"].is_string());
    let got = call(
        "event-wait",
        json!({"topic": "sk", "queue": "q", "timeout": 5000, "ack": false}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(got[0]["id"], sent["id"]);
    let acked = call(
        "event-ack",
        json!({"topic": "sk", "queue": "q", "ids": [sent["id"].clone()]}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(acked, json!({ "acked": 1, "unknown": [] }));
    let err = call("event-wait", json!({"topic": "sk", "timeout": -1}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("timeout"), "{err}");
    // The params schema declares the topic's form, so a schema-driven client knows it too.
    let err = call("event-emit", json!({"topic": "Bad Topic"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs, "{err}");
    assert!(
        err.to_string().contains("/topic") && err.to_string().contains("Bad Topic"),
        "{err}"
    );
    // Settling is idempotent: what the queue no longer holds is reported, not an error.
    let again = call(
        "event-ack",
        json!({"topic": "sk", "queue": "q", "ids": [sent["id"].clone(), "00000000"]}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        again,
        json!({ "acked": 0, "unknown": [sent["id"].clone(), "00000000"] })
    );
}

async fn the_event_middleware_routes_topics_to_skills(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    let seen = Record::default();
    let p = Project::new();
    p.skill(
        "router.skill.md",
        "---\nname: router\nmetadata:\n  event:\n    routes:\n      - { topic: deploy, ref: on-deploy }\n---\nrouted",
    );
    let record = |name: &'static str, seen: Record| {
        move |_ctx: skillgate::Context, args: Arc<Value>| {
            let seen = seen.clone();
            async move {
                if let Some(topic) = args.get("topic").and_then(Value::as_str) {
                    seen.push(json!([name, topic]));
                }
                Ok(None)
            }
        }
    };
    let kernel = p
        .builder()
        .bus(bus.clone())
        .native(native(
            "name: on-deploy\n",
            record("on-deploy", seen.clone()),
        ))
        .native(native(
            "name: listener\nmetadata:\n  event: { route: rollback }\n",
            record("listener", seen.clone()),
        ))
        .build();
    kernel
        .invoke("router", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    kernel
        .invoke("listener", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    // Invoking them again subscribes nothing twice.
    kernel
        .invoke("router", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    bus.emit(&event("deploy", 1)).await.unwrap();
    bus.emit(&event("rollback", 2)).await.unwrap();
    let mut seen = seen.at_least(2).await;
    seen.sort_by_key(|pair| pair[0].as_str().unwrap_or_default().to_string());
    assert_eq!(
        seen,
        [
            json!(["listener", "rollback"]),
            json!(["on-deploy", "deploy"])
        ]
    );
    // Each route subscribed once: one queue a topic, so no event can run twice.
    for topic in ["deploy", "rollback"] {
        assert_eq!(bus.store().queues(topic).await.unwrap().len(), 1, "{topic}");
    }
    bus.shutdown();
}

async fn event_unsubscribe_removes_one_handler_a_queue_or_every_handler(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    let handled = Record::default();
    let record = |name: &'static str| {
        let handled = handled.clone();
        move |_ctx: skillgate::Context, args: Arc<Value>| {
            let handled = handled.clone();
            async move {
                handled.push(json!([name, args["data"]["n"]]));
                Ok(None)
            }
        }
    };
    let kernel = Project::new()
        .builder()
        .bus(bus.clone())
        .native(native("name: first\n", record("first")))
        .native(native("name: second\n", record("second")))
        .build();
    let call = |tool: &'static str, args: Value| {
        let kernel = kernel.clone();
        async move {
            kernel
                .invoke(tool, args, InvokeOptions::default())
                .await
                .map(plain)
                .unwrap()
                .unwrap()
        }
    };
    let queues = || async { bus.store().queues("u").await.unwrap() };
    for handler in ["first", "second"] {
        call("event-subscribe", json!({"topic": "u", "ref": handler})).await;
    }
    call("event-subscribe", json!({"topic": "u", "queue": "inbox"})).await;
    let mut all = queues().await;
    all.sort();
    assert_eq!(all, ["handler:first", "handler:second", "inbox"]);
    // One handler: `second` gets the next event, `first` does not.
    let out = call("event-unsubscribe", json!({"topic": "u", "ref": "first"})).await;
    assert_eq!(out, json!({"removed": 1}));
    bus.emit(&event("u", 1)).await.unwrap();
    assert_eq!(handled.at_least(1).await, [json!(["second", 1])]);
    // A named queue: gone, with what it held.
    let out = call("event-unsubscribe", json!({"topic": "u", "queue": "inbox"})).await;
    assert_eq!(out, json!({"removed": 1}));
    assert_eq!(queues().await, ["handler:second"]);
    // Every handler of the topic.
    call("event-subscribe", json!({"topic": "u", "ref": "first"})).await;
    let out = call("event-unsubscribe", json!({"topic": "u"})).await;
    assert_eq!(out, json!({"removed": 2}));
    assert!(queues().await.is_empty());
    // Nothing left to remove.
    let out = call("event-unsubscribe", json!({"topic": "u", "ref": "first"})).await;
    assert_eq!(out, json!({"removed": 0}));
    bus.shutdown();
}

/// A kernel over `project` on `bus` whose `who` handler sends what it saw on `seen`.
fn recording(
    project: &Project,
    bus: Arc<Bus>,
    seen: tokio::sync::mpsc::UnboundedSender<Value>,
) -> Kernel {
    project
        .builder()
        .bus(bus)
        .native(native(
            "name: who\ndescription: Records who ran it.\n",
            move |ctx: skillgate::Context, args| {
                let seen = seen.clone();
                async move {
                    let a = ctx.authority();
                    let _ = seen.send(json!({
                        "level": a.level.as_str(),
                        "principal": a.principal.id(),
                        "k": args["k"],
                    }));
                    Ok(None)
                }
            },
        ))
        .build()
}

async fn a_kept_subscription_is_restored_after_a_restart_for_its_principal_with_its_args(
    b: &Backend,
) {
    use skillgate::kernel::authority::{Authority, Grants, Principal};
    let project = Project::new();
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let first = b.bus(Limits::default(), LONG).await;
    let k = recording(&project, first.clone(), tx.clone());
    // Project code serving the key `ops` subscribes: the handler is the key's.
    let ops = Principal::key("ops", Grants::default());
    k.invoke(
        "event-subscribe",
        json!({ "topic": "orders", "ref": "who", "args": { "k": 1 } }),
        InvokeOptions::as_authority(Authority::serving(ops)),
    )
    .await
    .unwrap();
    first.shutdown();
    // A new process on the same data: the worker starts again from what was kept.
    let second = b.bus(Limits::default(), LONG).await;
    let k2 = recording(&project, second.clone(), tx);
    assert_eq!(skillgate::events::restore_subscriptions(&k2).await, 1);
    second
        .emit(&skillgate::events::Event::new("orders", "placed"))
        .await
        .unwrap();
    let got = tokio::time::timeout(GUARD, seen.recv())
        .await
        .expect("the restored handler ran")
        .unwrap();
    assert_eq!(
        got,
        json!({ "level": "caller", "principal": "key:ops", "k": 1 })
    );
    // Unsubscribing forgets it.
    k2.invoke(
        "event-unsubscribe",
        json!({ "topic": "orders" }),
        InvokeOptions::default(),
    )
    .await
    .unwrap();
    assert!(second.store().subscriptions().await.unwrap().is_empty());
    second.shutdown();
}

async fn a_schedule_firing_is_taken_once_and_an_unchanged_put_keeps_it(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    let store = bus.store().clone();
    assert!(
        store
            .put_schedule("tick", "{\"a\":1}", Some(1_000))
            .await
            .unwrap()
    );
    // The same spec again: nothing written, the next firing stays.
    assert!(
        !store
            .put_schedule("tick", "{\"a\":1}", Some(9_000))
            .await
            .unwrap()
    );
    let listed = store.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].next_ms, listed[0].runs), (Some(1_000), 0));
    // Of two takers of the firing due at 1000, one wins; a stale due time wins nothing.
    assert!(
        store
            .take_firing("tick", 1_000, Some(2_000), true)
            .await
            .unwrap()
    );
    assert!(
        !store
            .take_firing("tick", 1_000, Some(2_000), true)
            .await
            .unwrap()
    );
    // A skipped firing moves on without counting a run.
    assert!(
        store
            .take_firing("tick", 2_000, Some(3_000), false)
            .await
            .unwrap()
    );
    let listed = store.schedules().await.unwrap();
    assert_eq!((listed[0].next_ms, listed[0].runs), (Some(3_000), 1));
    // The last run: no next firing.
    assert!(store.take_firing("tick", 3_000, None, true).await.unwrap());
    assert_eq!(store.schedules().await.unwrap()[0].next_ms, None);
    // A changed spec replaces it and counts again.
    assert!(
        store
            .put_schedule("tick", "{\"a\":2}", Some(5_000))
            .await
            .unwrap()
    );
    let listed = store.schedules().await.unwrap();
    assert_eq!((listed[0].next_ms, listed[0].runs), (Some(5_000), 0));
    assert!(store.delete_schedule("tick").await.unwrap());
    assert!(!store.delete_schedule("tick").await.unwrap());
    assert!(store.schedules().await.unwrap().is_empty());
}

async fn a_session_keeps_its_newest_entries_in_order_and_clears(b: &Backend) {
    let store = b.open(Limits::default()).await;
    for n in 1..=5 {
        store
            .session_append("chat/t1", n, &format!("{{\"n\":{n}}}"), 3)
            .await
            .unwrap();
    }
    store.session_append("chat/t2", 9, "{}", 3).await.unwrap();
    let texts = |entries: Vec<skillgate::events::SessionEntry>| {
        entries
            .into_iter()
            .map(|e| (e.at_ms, e.entry))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        texts(store.session_entries("chat/t1", 10).await.unwrap()),
        [
            (3, "{\"n\":3}".to_string()),
            (4, "{\"n\":4}".to_string()),
            (5, "{\"n\":5}".to_string())
        ],
        "the newest three, oldest first"
    );
    assert_eq!(
        texts(store.session_entries("chat/t1", 2).await.unwrap()),
        [(4, "{\"n\":4}".to_string()), (5, "{\"n\":5}".to_string())]
    );
    assert_eq!(store.session_clear("chat/t1").await.unwrap(), 3);
    assert!(
        store
            .session_entries("chat/t1", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.session_entries("chat/t2", 10).await.unwrap().len(),
        1,
        "other keys stay"
    );
}

async fn the_session_middleware_continues_a_conversation_across_replicas(b: &Backend) {
    let p = Project::new();
    p.skill(
        "chat.skill.js",
        "export const frontmatter = { metadata: { session: { maxEntries: 2 } } };
         export default async (ctx, args) => {
           if (args.text === 'fail') throw new Error('no such thing');
           return { heard: ctx.locals.session.history.map(h => h.args.text + '>' + (h.result ? h.result.heard.length : h.error.message)) };
         };
",
    );
    // Two replicas: each its own kernel and its own store on the same data.
    let a: Kernel = p
        .builder()
        .bus(b.bus(Limits::default(), LONG).await)
        .build();
    let b2: Kernel = p
        .builder()
        .bus(b.bus(Limits::default(), LONG).await)
        .build();
    let say = |kernel: &Kernel, session: &str, text: &str| {
        let kernel = kernel.clone();
        let (session, text) = (session.to_string(), text.to_string());
        async move {
            let mut options = InvokeOptions::default();
            options
                .context
                .nonlocals
                .insert("gateway".into(), json!({ "sessionId": session }));
            kernel
                .invoke("chat", json!({ "text": text }), options)
                .await
                .map(plain)
        }
    };
    let heard = |out: Option<Value>| out.unwrap()["heard"].clone();
    assert_eq!(
        heard(say(&a, "slack:T:C:1", "hi").await.unwrap()),
        json!([])
    );
    assert_eq!(
        heard(say(&b2, "slack:T:C:1", "more").await.unwrap()),
        json!(["hi>0"])
    );
    let err = say(&a, "slack:T:C:1", "fail").await.unwrap_err();
    assert!(err.message().contains("no such thing"));
    // maxEntries 2: the first turn is gone; the failed one is there with its error.
    assert_eq!(
        heard(say(&b2, "slack:T:C:1", "again").await.unwrap()),
        json!(["more>1", "fail>no such thing"])
    );
    // Another conversation, and a run outside any, see nothing.
    assert_eq!(heard(say(&a, "slack:T:C:2", "x").await.unwrap()), json!([]));
    let out = a
        .invoke("chat", json!({ "text": "y" }), InvokeOptions::default())
        .await
        .map(plain);
    assert_eq!(heard(out.unwrap()), json!([]));
}

/// The `n` of the next followed event (a hang guard around the wait).
async fn next_n(follow: &mut skillgate::events::tail::Follow) -> u64 {
    let event = tokio::time::timeout(GUARD, follow.next())
        .await
        .expect("an event arrives")
        .expect("following goes on");
    event
        .event
        .data
        .as_ref()
        .and_then(|d| d["n"].as_u64())
        .expect("n")
}

async fn follow_resumes_after_an_id_with_no_gap_and_no_duplicate(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    let mut ids = Vec::new();
    for n in 1..=3 {
        let e = event("feed", n);
        ids.push(e.id.clone());
        bus.emit(&e).await.unwrap();
    }
    // Resume after the first: 2 and 3 from the buffer, then live ones, each once.
    let mut follow = bus.follow("feed", Some(&ids[0])).await.unwrap();
    assert!(!follow.resumed_with_gap);
    let emitter = bus.clone();
    let live = tokio::spawn(async move {
        for n in 4..=6 {
            emitter.emit(&event("feed", n)).await.unwrap();
        }
    });
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(next_n(&mut follow).await);
    }
    live.await.unwrap();
    assert_eq!(got, [2, 3, 4, 5, 6]);
    // Nothing more: no duplicate arrives.
    let extra = tokio::time::timeout(Duration::from_millis(600), follow.next()).await;
    assert!(extra.is_err(), "no duplicate: {extra:?}");
    // Without a resume point only new events come.
    let mut fresh = bus.follow("feed", None).await.unwrap();
    bus.emit(&event("feed", 7)).await.unwrap();
    assert_eq!(next_n(&mut fresh).await, 7);
}

async fn follow_sees_events_another_process_emits(b: &Backend) {
    if matches!(b, Backend::Memory(_)) {
        return; // one process's memory
    }
    let reader = b.bus(Limits::default(), LONG).await;
    let writer = b.bus(Limits::default(), LONG).await;
    let mut follow = reader.follow("shared", None).await.unwrap();
    writer.emit(&event("shared", 1)).await.unwrap();
    writer.emit(&event("shared", 2)).await.unwrap();
    assert_eq!(next_n(&mut follow).await, 1);
    assert_eq!(next_n(&mut follow).await, 2);
}

async fn follow_from_an_id_that_left_the_buffer_starts_at_the_oldest_and_says_so(b: &Backend) {
    let limits = Limits {
        buffer_events: 2,
        ..Limits::default()
    };
    let bus = b.bus(limits, LONG).await;
    let first = event("small", 1);
    bus.emit(&first).await.unwrap();
    for n in 2..=4 {
        bus.emit(&event("small", n)).await.unwrap();
    }
    let mut follow = bus.follow("small", Some(&first.id)).await.unwrap();
    assert!(follow.resumed_with_gap);
    assert_eq!(next_n(&mut follow).await, 3);
    assert_eq!(next_n(&mut follow).await, 4);
}

async fn follow_keeps_buffer_order_while_two_writers_emit_at_once(b: &Backend) {
    let reader = b.bus(Limits::default(), LONG).await;
    let mut follow = reader.follow("busy", None).await.unwrap();
    let mut writers = Vec::new();
    for w in 0..2u64 {
        let bus = b.bus(Limits::default(), LONG).await;
        writers.push(tokio::spawn(async move {
            for n in 0..100 {
                bus.emit(&event("busy", w * 1000 + n)).await.unwrap();
            }
        }));
    }
    let mut got = Vec::new();
    for _ in 0..200 {
        got.push(next_n(&mut follow).await);
    }
    for w in writers {
        w.await.unwrap();
    }
    // Every event once, each writer's in its own order.
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 200, "each event once: {got:?}");
    for w in 0..2u64 {
        let mine: Vec<u64> = got.iter().copied().filter(|n| n / 1000 == w).collect();
        assert!(
            mine.windows(2).all(|p| p[0] < p[1]),
            "writer {w} in order: {mine:?}"
        );
    }
}

async fn a_key_is_claimed_once_and_replays_what_its_holder_answered(b: &Backend) {
    use skillgate::events::KeyClaim;
    let day = Duration::from_secs(86_400);
    let store = b.open(Limits::default()).await;
    assert_eq!(
        store.claim_key("k1", "fp-a", day).await.unwrap(),
        KeyClaim::Won
    );
    let held = KeyClaim::Held {
        fingerprint: "fp-a".into(),
        response: None,
    };
    assert_eq!(store.claim_key("k1", "fp-b", day).await.unwrap(), held);
    store.settle_key("k1", "answer", day).await.unwrap();
    // Another process on the same data sees the claim and the answer.
    let other = b.open(Limits::default()).await;
    assert_eq!(
        other.claim_key("k1", "fp-a", day).await.unwrap(),
        KeyClaim::Held {
            fingerprint: "fp-a".into(),
            response: Some("answer".into()),
        }
    );
    store.release_key("k1").await.unwrap();
    assert_eq!(
        other.claim_key("k1", "fp-c", day).await.unwrap(),
        KeyClaim::Won
    );
}

async fn an_expired_claim_is_free_again(b: &Backend) {
    use skillgate::events::KeyClaim;
    let store = b.open(Limits::default()).await;
    let short = Duration::from_millis(5);
    assert_eq!(
        store.claim_key("k2", "a", short).await.unwrap(),
        KeyClaim::Won
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        store.claim_key("k2", "b", short).await.unwrap(),
        KeyClaim::Won
    );
}

async fn of_many_processes_claiming_one_key_at_once_one_wins(b: &Backend) {
    use skillgate::events::KeyClaim;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(b.open(Limits::default()).await);
    }
    let mut claims = Vec::new();
    for (i, store) in stores.iter().cycle().take(16).enumerate() {
        let store = store.clone();
        claims.push(tokio::spawn(async move {
            store
                .claim_key("contested", &format!("fp{i}"), Duration::from_secs(60))
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for claim in claims {
        if claim.await.unwrap() == KeyClaim::Won {
            won += 1;
        }
    }
    assert_eq!(won, 1);
}

fn delivery_claim(fingerprint: &str) -> skillgate::events::Claim {
    skillgate::events::Claim {
        key: "delivery-1".into(),
        fingerprint: fingerprint.into(),
        ttl: Duration::from_secs(60),
        answer: format!("answer-{fingerprint}"),
    }
}

async fn a_claimed_emit_stores_its_events_only_when_it_wins_the_key_with_its_answer_in_the_same_commit(
    b: &Backend,
) {
    use skillgate::events::KeyClaim;
    let store = b.open(Limits::default()).await;
    store.create_queue("orders", "work", false).await.unwrap();
    assert_eq!(
        store
            .emit_claimed(&delivery_claim("a"), &[event("orders", 1)])
            .await
            .unwrap(),
        KeyClaim::Won
    );
    // Another process: the key is held, with the first one's answer, and its event is not
    // stored.
    let other = b.open(Limits::default()).await;
    let held = KeyClaim::Held {
        fingerprint: "a".into(),
        response: Some("answer-a".into()),
    };
    assert_eq!(
        other
            .emit_claimed(&delivery_claim("b"), &[event("orders", 2)])
            .await
            .unwrap(),
        held
    );
    assert_eq!(ns(&store.peek("orders", "work", 10).await.unwrap()), [1]);
    assert_eq!(
        other
            .claim_key("delivery-1", "c", Duration::from_secs(60))
            .await
            .unwrap(),
        held
    );
}

async fn of_many_processes_queueing_under_one_key_at_once_one_queues_and_the_rest_are_told_its_answer(
    b: &Backend,
) {
    use skillgate::events::KeyClaim;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(b.open(Limits::default()).await);
    }
    stores[0]
        .create_queue("orders", "work", false)
        .await
        .unwrap();
    let mut sends = Vec::new();
    for (i, store) in stores.iter().cycle().take(16).enumerate() {
        let store = store.clone();
        sends.push(tokio::spawn(async move {
            let got = store
                .emit_claimed(
                    &delivery_claim(&i.to_string()),
                    &[event("orders", i as u64)],
                )
                .await
                .unwrap();
            (i, got)
        }));
    }
    let mut outcomes = Vec::new();
    for send in sends {
        outcomes.push(send.await.unwrap());
    }
    let winners: Vec<usize> = outcomes
        .iter()
        .filter(|(_, got)| *got == KeyClaim::Won)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let winner = winners[0];
    // None is left to ask again later: the claim and its answer committed together.
    let told = KeyClaim::Held {
        fingerprint: winner.to_string(),
        response: Some(format!("answer-{winner}")),
    };
    for (i, got) in &outcomes {
        if *i != winner {
            assert_eq!(got, &told, "send {i}");
        }
    }
    assert_eq!(
        ns(&stores[0].peek("orders", "work", 20).await.unwrap()),
        [winner as u64]
    );
}

#[test]
fn a_claimed_emit_whose_events_cannot_be_stored_leaves_its_key_free() {
    use skillgate::events::KeyClaim;
    let Some(b) = Backend::postgres() else {
        return;
    };
    crate::support::common::runtime().block_on(async {
        let store = b.open(Limits::default()).await;
        // Postgres keeps no NUL in text: the event's insert fails inside the claim's commit.
        let mut bad = event("orders", 1);
        bad.id = "bad\0id".into();
        let failed = store.emit_claimed(&delivery_claim("a"), &[bad]).await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(
            store
                .emit_claimed(&delivery_claim("b"), &[event("orders", 2)])
                .await
                .unwrap(),
            KeyClaim::Won,
            "the sender's retry takes the key"
        );
        b.cleanup().await;
    });
}

/// Ids are 64-bit: among 300k events no two share one (with 32-bit ids about ten would).
#[test]
fn event_ids_do_not_repeat_among_many_events() {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..300_000 {
        let id = skillgate::events::Event::new("t", "k").id;
        assert!(seen.insert(id.clone()), "event id `{id}` was given twice");
    }
}

async fn two_events_sharing_an_id_are_acked_independently_by_receipt(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("twin", "q", false).await.unwrap();
    let first = event("twin", 1);
    let mut second = event("twin", 2);
    second.id = first.id.clone();
    bus.emit(&first).await.unwrap();
    bus.emit(&second).await.unwrap();
    let got = bus.wait("twin", "q", GUARD, 10, false).await.unwrap();
    assert_eq!(ns(&got), [1, 2]);
    assert_ne!(
        got[0].receipt, got[1].receipt,
        "each entry has its own receipt"
    );
    // By id the two cannot be told apart: refused, and neither is touched.
    let err = bus
        .ack_ids("twin", "q", std::slice::from_ref(&first.id), false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("receipt"), "{err}");
    assert_eq!(
        ns(&bus.store().peek("twin", "q", 10).await.unwrap()),
        [1, 2]
    );
    // By receipt, acking the second leaves the first; nacking the first brings back only it.
    bus.ack("twin", "q", &[got[1].receipt], false)
        .await
        .unwrap();
    assert_eq!(ns(&bus.store().peek("twin", "q", 10).await.unwrap()), [1]);
    bus.ack("twin", "q", &[got[0].receipt], true).await.unwrap();
    let again = bus.wait("twin", "q", GUARD, 10, false).await.unwrap();
    assert_eq!((ns(&again), again[0].receipt), (vec![1], got[0].receipt));
    // Now the id names one entry: acking by id works.
    bus.ack_ids("twin", "q", std::slice::from_ref(&first.id), false)
        .await
        .unwrap();
    assert!(bus.store().peek("twin", "q", 10).await.unwrap().is_empty());
}

async fn emit_many_stores_a_batch_in_order_in_every_queue(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("many", "a", false).await.unwrap();
    bus.subscribe_queue("many", "b", false).await.unwrap();
    bus.subscribe_queue("other", "a", false).await.unwrap();
    let mut batch: Vec<_> = (1..=300).map(|n| event("many", n)).collect();
    batch.insert(10, event("other", 1000));
    bus.emit_many(&batch).await.unwrap();
    let want: Vec<u64> = (1..=300).collect();
    for queue in ["a", "b"] {
        let got = bus.wait("many", queue, GUARD, 1000, true).await.unwrap();
        assert_eq!(ns(&got), want, "queue {queue}");
    }
    let other = bus.wait("other", "a", GUARD, 1000, true).await.unwrap();
    assert_eq!(ns(&other), [1000]);
    let buffered = bus.store().buffered("many", None, 1000).await.unwrap();
    assert_eq!(buffered.len(), 300);
    assert_eq!(buffered[0].data.as_ref().unwrap()["n"], 1);
    let err = bus
        .emit_many(&[event("fine", 1), event("Not A Topic", 2)])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs);
    assert!(
        bus.store()
            .buffered("fine", None, 10)
            .await
            .unwrap()
            .is_empty(),
        "a batch with a bad topic stores nothing"
    );
}

async fn nacking_several_puts_them_at_the_front_in_the_order_given(b: &Backend) {
    let bus = b.bus(Limits::default(), LONG).await;
    bus.subscribe_queue("nks", "q", false).await.unwrap();
    for n in 1..=6 {
        bus.emit(&event("nks", n)).await.unwrap();
    }
    let got = bus.wait("nks", "q", GUARD, 4, false).await.unwrap();
    assert_eq!(ns(&got), [1, 2, 3, 4]);
    // Nacked 4 then 2: both go before 5 and 6 (not back to their old places), 4 first.
    bus.ack("nks", "q", &[got[3].receipt, got[1].receipt], true)
        .await
        .unwrap();
    let next = bus.wait("nks", "q", GUARD, 10, true).await.unwrap();
    assert_eq!(ns(&next), [4, 2, 5, 6], "1 and 3 are still in flight");
}

fn consumer(
    store: Arc<dyn EventStore>,
    topic: &str,
    prefetch: usize,
    visibility: Duration,
) -> skillgate::events::Consumer {
    skillgate::events::Consumer::start(
        store,
        topic,
        "q",
        skillgate::events::ConsumerOptions {
            prefetch,
            visibility,
        },
        tokio_util::sync::CancellationToken::new(),
    )
}

async fn a_consumer_hands_out_each_entry_once_and_its_acks_remove_them(b: &Backend) {
    let store = b.open(Limits::default()).await;
    store.create_queue("cons", "q", false).await.unwrap();
    let batch: Vec<_> = (1..=200).map(|n| event("cons", n)).collect();
    store.emit_many(&batch).await.unwrap();
    let consumer = Arc::new(consumer(store.clone(), "cons", 16, LONG));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (consumer, seen) = (consumer.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = tokio::time::timeout(Duration::from_millis(500), consumer.next()).await;
                let Ok(Some(delivery)) = next else { return };
                seen.lock()
                    .push(delivery.event.data.as_ref().unwrap()["n"].as_u64().unwrap());
                consumer.ack(delivery.receipt);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    consumer.flush().await;
    let mut seen = seen.lock().clone();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (1..=200).collect::<Vec<u64>>(),
        "each entry exactly once"
    );
    assert!(
        store.peek("cons", "q", 10).await.unwrap().is_empty(),
        "every ack reached the store"
    );
    // Entries emitted while it runs arrive too (the consumer wakes, it does not wait a poll).
    store.emit(&event("cons", 201)).await.unwrap();
    let late = tokio::time::timeout(GUARD, consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(late.event.data.as_ref().unwrap()["n"], 201);
    consumer.close().await;
}

async fn closing_a_consumer_returns_what_it_prefetched_to_the_front(b: &Backend) {
    let store = b.open(Limits::default()).await;
    store.create_queue("shut", "q", false).await.unwrap();
    for n in 1..=10 {
        store.emit(&event("shut", n)).await.unwrap();
    }
    let consumer = consumer(store.clone(), "shut", 8, LONG);
    let first = tokio::time::timeout(GUARD, consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.event.data.as_ref().unwrap()["n"], 1);
    consumer.ack(first.receipt);
    consumer.close().await;
    assert!(
        consumer.next().await.is_none(),
        "a closed consumer hands out nothing"
    );
    // Every prefetched entry is visible again at once, in order, before the unclaimed ones.
    let back = store.claim("shut", "q", 100, LONG).await.unwrap();
    assert_eq!(ns(&back), (2..=10).collect::<Vec<u64>>());
}

async fn a_prefetched_entry_whose_claim_grew_old_is_returned_not_handed_out(b: &Backend) {
    let store = b.open(Limits::default()).await;
    store.create_queue("stale", "q", false).await.unwrap();
    for n in 1..=3 {
        store.emit(&event("stale", n)).await.unwrap();
    }
    // Visibility 2 s: an entry held locally for more than 0.5 s is too old to hand out.
    let consumer = consumer(store.clone(), "stale", 8, Duration::from_secs(2));
    let first = tokio::time::timeout(GUARD, consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            first.event.data.as_ref().unwrap()["n"].as_u64(),
            first.attempts
        ),
        (Some(1), 1)
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    // 2 and 3 waited too long: they went back to the store and come again as new claims.
    let next = tokio::time::timeout(GUARD, consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.event.data.as_ref().unwrap()["n"], 2);
    assert_eq!(
        next.attempts, 2,
        "handed out from a fresh claim, not the old one"
    );
    consumer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stores_opened_at_once_on_a_fresh_schema_all_create_and_migrate_it() {
    let Some(Backend::Postgres { url, schema }) = Backend::postgres() else {
        return;
    };
    // Replicas starting together: the schema is created and migrated once, none fails on the
    // race `CREATE SCHEMA IF NOT EXISTS` and the migrations would otherwise have.
    let opens = (0..8).map(|_| PostgresStore::connect(&url, Some(&schema), Limits::default()));
    let stores = futures::future::join_all(opens).await;
    let stores: Vec<PostgresStore> = stores
        .into_iter()
        .map(|s| s.expect("every replica opens the store"))
        .collect();
    stores[0].emit(&event("fresh", 1)).await.unwrap();
    let buffered = stores[7].buffered("fresh", None, 10).await.unwrap();
    assert_eq!(buffered.len(), 1);
    let pending = skillgate::events::migrations::pending(
        &format!("{url}?options=-c%20search_path%3D{schema}"),
        std::path::Path::new("."),
    )
    .await
    .unwrap();
    assert!(pending.is_empty(), "{pending:?}");
}
