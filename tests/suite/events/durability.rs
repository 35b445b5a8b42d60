//! What the durable stores promise under stress: replicas sharing a consumer group, a process
//! killed with SIGKILL again and again, and a Postgres restart during consumption.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::{Event, EventStore, Limits};

use crate::support::common::{event, skillgate_command};
use crate::support::stores::Backend;

fn n_of(e: &Event) -> u64 {
    e.data
        .as_ref()
        .and_then(|d| d["n"].as_u64())
        .expect("numbered event")
}

/// Consumes `queue` until it has been empty for a while; returns (n, attempts) per delivery.
async fn consume(store: Arc<dyn EventStore>, topic: &str, queue: &str) -> Vec<(u64, u32)> {
    let mut seen = Vec::new();
    let mut idle = 0;
    while idle < 40 {
        let batch = store
            .claim(topic, queue, 8, Duration::from_secs(30))
            .await
            .expect("claim");
        if batch.is_empty() {
            idle += 1;
            tokio::time::sleep(Duration::from_millis(25)).await;
            continue;
        }
        idle = 0;
        for d in batch {
            seen.push((n_of(&d.event), d.attempts));
            store
                .ack(topic, queue, std::slice::from_ref(&d.receipt))
                .await
                .expect("ack");
        }
    }
    seen
}

/// Two replicas' stores on `backend`'s Postgres schema, each with its own pools and listener.
async fn two_replicas(backend: &Backend) -> (PostgresStore, PostgresStore) {
    let Backend::Postgres { url, schema } = backend else {
        unreachable!("a Postgres backend")
    };
    let connect = || PostgresStore::connect(url, Some(schema), Limits::default());
    (
        connect().await.expect("replica a"),
        connect().await.expect("replica b"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_on_one_postgres_share_a_consumer_group_each_event_once() {
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let (a, b) = two_replicas(&backend).await;
    let (a, b): (Arc<dyn EventStore>, Arc<dyn EventStore>) = (Arc::new(a), Arc::new(b));
    a.create_queue("shared", "workers", false).await.unwrap();
    let total = 300u64;
    let producer = {
        let a = a.clone();
        tokio::spawn(async move {
            for n in 0..total {
                a.emit(&event("shared", n)).await.unwrap();
            }
        })
    };
    let ca = tokio::spawn(consume(a.clone(), "shared", "workers"));
    let cb = tokio::spawn(consume(b.clone(), "shared", "workers"));
    producer.await.unwrap();
    let (sa, sb) = (ca.await.unwrap(), cb.await.unwrap());
    assert!(
        !sa.is_empty() && !sb.is_empty(),
        "both replicas took part: {} / {}",
        sa.len(),
        sb.len()
    );
    let mut all: Vec<u64> = sa.iter().chain(&sb).map(|(n, _)| *n).collect();
    all.sort();
    assert_eq!(
        all,
        (0..total).collect::<Vec<_>>(),
        "every event delivered and acked exactly once"
    );
    backend.cleanup().await;
}

/// Runs `skillgate events soak` against `store_url`, killing it with SIGKILL `kills` times at
/// random moments, then checks what every emit that returned became.
async fn crash_and_check(
    store_url: &str,
    open: impl std::future::Future<Output = Arc<dyn EventStore>>,
) {
    let project = tempfile::tempdir().expect("project dir");
    let per_run = 400u64;
    let kills = 10;
    let emitted: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let acked: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let first_deliveries: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let mut seed = skillgate::context::id::next_id();
    for run in 0..=kills {
        let mut child = skillgate_command(project.path())
            .arg("--store")
            .arg(store_url)
            .args([
                "events",
                "soak",
                "--topic",
                "crash",
                "--queue",
                "q",
                "--visibility",
                "300",
            ])
            .arg("--start")
            .arg((run * per_run).to_string())
            .arg("--count")
            .arg(per_run.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn soak");
        if run < kills {
            // A pseudo-random moment between 50 and 450 ms into the run.
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let wait = 50 + (seed >> 33) % 400;
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let _ = child.kill();
        }
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .expect("soak output");
        let text = String::from_utf8_lossy(&out.stdout);
        // A killed process may leave half a line at the end: only whole lines count.
        let whole = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        for line in whole.lines() {
            let mut parts = line.split(' ');
            let (kind, n) = (
                parts.next(),
                parts.next().and_then(|n| n.parse::<u64>().ok()),
            );
            match (kind, n) {
                (Some("E"), Some(n)) => {
                    emitted.lock().insert(n);
                }
                (Some("A"), Some(n)) => {
                    acked.lock().insert(n);
                }
                (Some("D"), Some(n)) => {
                    let attempts: u32 = parts.next().and_then(|a| a.parse().ok()).unwrap_or(0);
                    if attempts == 1 {
                        let mut first = first_deliveries.lock();
                        *first.entry(n).or_insert(0) += 1;
                    }
                }
                _ => {}
            }
        }
    }
    // Whatever is still queued (in flight when a process died) comes back once its visibility
    // timeout passes.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let store = open.await;
    let left = consume(store, "crash", "q").await;
    let acked = acked.lock().clone();
    let emitted = emitted.lock().clone();
    let drained: HashSet<u64> = left.iter().map(|(n, _)| *n).collect();
    assert!(
        emitted.len() as u64 > per_run,
        "the runs emitted something: {}",
        emitted.len()
    );
    // `A n` is printed just before the ack is sent, so an event is lost only if it is neither
    // in that set nor still in the queue.
    let lost: Vec<u64> = emitted
        .iter()
        .filter(|n| !acked.contains(n) && !drained.contains(n))
        .copied()
        .collect();
    assert!(
        lost.is_empty(),
        "events whose emit returned were lost: {lost:?}"
    );
    let duplicated_first: Vec<u64> = first_deliveries
        .lock()
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(n, _)| *n)
        .collect();
    assert!(
        duplicated_first.is_empty(),
        "an event was delivered twice without a redelivery: {duplicated_first:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_survives_repeated_sigkill_without_losing_an_emitted_event() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("crash.db");
    let url = format!("sqlite://{}", db.display());
    let open = async {
        Arc::new(
            skillgate::events::sqlite::SqliteStore::open(&db, Limits::default(), false)
                .await
                .expect("open"),
        ) as Arc<dyn EventStore>
    };
    crash_and_check(&url, open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_repeated_sigkill_without_losing_an_emitted_event() {
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let Backend::Postgres { url, schema } = &backend else {
        unreachable!()
    };
    // The soak process uses the database's default schema; give it a database of its own.
    let database = schema.clone();
    let admin = sqlx::PgPool::connect(url).await.expect("admin");
    sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&admin)
        .await
        .expect("create db");
    let db_url = match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{database}"),
        None => panic!("DATABASE_URL has no database name"),
    };
    let open = {
        let db_url = db_url.clone();
        async move {
            Arc::new(
                PostgresStore::connect(&db_url, None, Limits::default())
                    .await
                    .expect("open"),
            ) as Arc<dyn EventStore>
        }
    };
    crash_and_check(&db_url, open).await;
    let _ = sqlx::query(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .execute(&admin)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_during_consumption_loses_no_event() {
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let Some(pg) = crate::support::common::PgCtl::from_env() else {
        return;
    };
    let store = backend.open(Limits::default()).await;
    store.create_queue("restart", "q", false).await.unwrap();
    let total = 200u64;
    for n in 0..total / 2 {
        store.emit(&event("restart", n)).await.unwrap();
    }
    let consumer = tokio::spawn({
        let store = store.clone();
        async move {
            let mut seen = HashSet::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while seen.len() < total as usize && tokio::time::Instant::now() < deadline {
                match store.claim("restart", "q", 4, Duration::from_secs(2)).await {
                    Ok(batch) => {
                        for d in batch {
                            if store
                                .ack("restart", "q", std::slice::from_ref(&d.receipt))
                                .await
                                .is_ok()
                            {
                                seen.insert(n_of(&d.event));
                            }
                        }
                    }
                    // The server is down: try again.
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    pg.run("restart");
    // Emits after the restart go through a pool that reconnects.
    let mut n = total / 2;
    while n < total {
        if store.emit(&event("restart", n)).await.is_ok() {
            n += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let seen = consumer.await.unwrap();
    let missing: Vec<u64> = (0..total).filter(|n| !seen.contains(n)).collect();
    assert!(missing.is_empty(), "lost across the restart: {missing:?}");
    backend.cleanup().await;
}

/// Wakeups on `wakeups` until one for `last` arrives: every topic received, in order.
async fn woken_until(
    wakeups: &mut tokio::sync::broadcast::Receiver<String>,
    last: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some(last) {
        let topic = tokio::time::timeout(Duration::from_secs(30), wakeups.recv())
            .await
            .unwrap_or_else(|_| panic!("no wakeup for `{last}`; woken for {seen:?}"))
            .expect("wakeups open");
        seen.push(topic);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_woken_once_by_its_own_emit_and_by_a_peers_through_the_database() {
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let (a, b) = two_replicas(&backend).await;
    let (mut woken_a, mut woken_b) = (a.wakeups(), b.wakeups());
    a.emit(&event("orders", 1)).await.unwrap();
    // Postgres delivers notifications in commit order: by the time `a` hears of `b`'s later
    // emit, it has heard of its own, had it not dropped it.
    assert_eq!(
        woken_until(&mut woken_b, "orders").await,
        ["orders"],
        "b hears of a's emit"
    );
    b.emit(&event("marker", 2)).await.unwrap();
    assert_eq!(
        woken_until(&mut woken_a, "marker").await,
        ["orders", "marker"],
        "a woke its own waiters once for its emit (at its commit), not again for the echo of \
         its notification, and was woken by b's"
    );
    assert_eq!(
        woken_until(&mut woken_b, "marker").await,
        ["marker"],
        "b woke once for its own emit"
    );
    backend.cleanup().await;
}
