//! The event store from the command line: `migrate`, `events tail|replay|dead`, and the
//! `shutdown` topic on SIGTERM. The store commands run against the embedded SQLite store of a
//! fresh project and, when `DATABASE_URL` is set, against a fresh Postgres database too.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::common::{skillgate_command, stderr, stdout};
use crate::support::stores::{Store, admin_query};

fn skillgate(project: &std::path::Path, args: &[&str]) -> Output {
    skillgate_on(project, &Store::sqlite(), args)
}

fn skillgate_on(project: &std::path::Path, store: &Store, args: &[&str]) -> Output {
    let mut command = skillgate_command(project);
    command.env_remove("DATABASE_URL");
    if let Some(url) = &store.url {
        command.arg("--store").arg(url);
    }
    command.args(args).output().expect("run skillgate")
}

fn lines(out: &Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON envelope per line"))
        .collect()
}

fn emit(project: &std::path::Path, store: &Store, topic: &str, n: u64) -> Value {
    let out = skillgate_on(
        project,
        store,
        &[
            "run",
            "event-emit",
            "--topic",
            topic,
            "--data",
            &format!("{{\"n\":{n}}}"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("envelope")
}

#[test]
fn migrate_creates_the_embedded_store_in_the_project() {
    let dir = tempfile::tempdir().unwrap();
    let out = skillgate(dir.path(), &["migrate"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("sqlite"));
    assert!(dir.path().join(".skillgate/events.db").is_file());
}

#[test]
fn migrate_check_lists_pending_migrations_and_exits_1_until_they_are_applied_on_every_store() {
    for store in Store::all() {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| skillgate_on(dir.path(), &store, args);
        let out = run(&["migrate", "--check"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}: {}",
            store.name(),
            stderr(&out)
        );
        let said = stdout(&out);
        assert!(
            said.contains("pending migration"),
            "{}: {said}",
            store.name()
        );
        assert!(said.contains("0001 events"), "{}: {said}", store.name());
        // Checking changes nothing: the embedded store's file is not even created.
        if store.url.is_none() {
            assert!(!dir.path().join(".skillgate/events.db").exists());
        }
        assert_eq!(run(&["migrate", "--check"]).status.code(), Some(1));
        let out = run(&["migrate"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            store.name(),
            stderr(&out)
        );
        let out = run(&["migrate", "--check"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            store.name(),
            stdout(&out)
        );
        assert!(stdout(&out).contains("is up to date"), "{}", store.name());
    }
}

#[test]
fn migrate_check_on_an_unreachable_store_exits_2_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = skillgate_command(dir.path());
    command.env_remove("DATABASE_URL");
    let out = command
        .args([
            "--store",
            "postgres://someone:hunter2@127.0.0.1:1/none",
            "migrate",
            "--check",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read the event store"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
}

#[test]
fn replicas_starting_at_once_on_a_fresh_postgres_database_all_migrate_it() {
    let Some(store) = Store::all().into_iter().find(|s| s.url.is_some()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Eight processes race to create the tables (the migrator's advisory lock makes them take
    // turns) and, with a schema in the URL, the schema itself.
    let url = format!(
        "{}?options=-c%20search_path%3Dreplicas",
        store.url.as_ref().unwrap()
    );
    admin_query(store.url.as_ref().unwrap(), "CREATE SCHEMA replicas");
    let children: Vec<_> = (0..8)
        .map(|_| {
            let mut command = skillgate_command(dir.path());
            command.env_remove("DATABASE_URL");
            command
                .args(["--store", url.as_str(), "migrate"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let mut command = skillgate_command(dir.path());
    command.env_remove("DATABASE_URL");
    let out = command
        .args(["--store", url.as_str(), "migrate", "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn replay_prints_the_buffer_in_emit_order_and_from_an_id_on_every_store() {
    for store in Store::all() {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| skillgate_on(dir.path(), &store, args);
        let first = emit(dir.path(), &store, "audit", 1);
        emit(dir.path(), &store, "audit", 2);
        emit(dir.path(), &store, "audit", 3);
        let out = run(&["events", "replay", "audit"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            store.name(),
            stderr(&out)
        );
        let ns: Vec<u64> = lines(&out)
            .iter()
            .map(|e| e["data"]["n"].as_u64().unwrap())
            .collect();
        assert_eq!(ns, [1, 2, 3], "{}", store.name());
        let id = first["id"].as_str().unwrap();
        let after = lines(&run(&["events", "replay", "audit", "--from", id]));
        let ns: Vec<u64> = after
            .iter()
            .map(|e| e["data"]["n"].as_u64().unwrap())
            .collect();
        assert_eq!(ns, [2, 3], "{}", store.name());
        let out = run(&["events", "replay", "audit", "--from", "ffffffff"]);
        assert_eq!(out.status.code(), Some(1), "{}", store.name());
        assert!(stderr(&out).contains("`ffffffff` is not in the buffer"));
    }
}

#[test]
fn tail_prints_the_last_events_on_every_store() {
    for store in Store::all() {
        let dir = tempfile::tempdir().unwrap();
        for n in 1..=4 {
            emit(dir.path(), &store, "feed", n);
        }
        let out = skillgate_on(
            dir.path(),
            &store,
            &["events", "tail", "feed", "--last", "2", "--no-follow"],
        );
        let ns: Vec<u64> = lines(&out)
            .iter()
            .map(|e| e["data"]["n"].as_u64().unwrap())
            .collect();
        assert_eq!(ns, [3, 4], "{}", store.name());
    }
}

#[test]
fn dead_lists_dead_letters_and_requeue_puts_them_back_on_every_store() {
    for store in Store::all() {
        dead_letters_round_trip(&store);
    }
}

fn dead_letters_round_trip(store: &Store) {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = skillgate_on(dir.path(), store, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{} {args:?}: {}",
            store.name(),
            stderr(&out)
        );
        out
    };
    run(&["run", "event-subscribe", "--topic", "jobs", "--queue", "w"]);
    emit(dir.path(), store, "jobs", 7);
    emit(dir.path(), store, "jobs", 8);
    // Nack them until they use up their five deliveries.
    for _ in 0..5 {
        let got: Value = serde_json::from_slice(
            &run(&[
                "run",
                "event-wait",
                "--topic",
                "jobs",
                "--queue",
                "w",
                "--timeout",
                "2000",
                "--no-ack",
            ])
            .stdout,
        )
        .unwrap();
        let got = got.as_array().unwrap();
        assert_eq!(got.len(), 2, "both delivered: {got:?}");
        for delivered in got {
            let id = delivered["id"].as_str().unwrap();
            run(&[
                "run",
                "event-ack",
                "--topic",
                "jobs",
                "--queue",
                "w",
                "--id",
                id,
                "--nack",
            ]);
        }
    }
    let wait = |timeout: &str| -> Value {
        serde_json::from_slice(
            &run(&[
                "run",
                "event-wait",
                "--topic",
                "jobs",
                "--queue",
                "w",
                "--timeout",
                timeout,
            ])
            .stdout,
        )
        .unwrap()
    };
    assert_eq!(wait("0"), serde_json::json!([]));
    let dead = lines(&run(&["events", "dead", "jobs"]));
    assert_eq!(dead.len(), 2);
    let mut died: Vec<_> = dead
        .iter()
        .map(|d| {
            (
                d["queue"].clone(),
                d["attempts"].clone(),
                d["event"]["data"]["n"].clone(),
            )
        })
        .collect();
    died.sort_by_key(|d| d.2.as_u64());
    assert_eq!(
        died,
        [
            (json!("w"), json!(5), json!(7)),
            (json!("w"), json!(5), json!(8))
        ]
    );
    // `skillgate dead` lists every topic's letters; `replay` puts one back into its queue.
    let listed: Value = serde_json::from_slice(&run(&["dead", "list", "--json"]).stdout).unwrap();
    let letters = listed["letters"].as_array().unwrap();
    assert_eq!(letters.len(), 2, "{listed}");
    let seven = letters
        .iter()
        .find(|l| l["event"]["data"]["n"] == 7)
        .expect("the letter of 7");
    assert_eq!(
        (&seven["topic"], &seven["queue"]),
        (&json!("jobs"), &json!("w"))
    );
    let first = seven["id"].as_str().unwrap();
    run(&["dead", "replay", first]);
    let back = wait("2000");
    assert_eq!(back.as_array().unwrap().len(), 1, "{back}");
    assert_eq!(back[0]["data"]["n"], 7);
    let out = skillgate_on(dir.path(), store, &["dead", "replay", first]);
    assert!(!out.status.success(), "a replayed letter is gone");
    assert!(stderr(&out).contains(first), "{}", stderr(&out));
    // `events dead --requeue` puts back the rest of a topic's letters.
    run(&["events", "dead", "jobs", "--requeue"]);
    assert!(lines(&run(&["events", "dead", "jobs"])).is_empty());
    let back = wait("2000");
    assert_eq!(back[0]["data"]["n"], 8);
}

/// `skillgate run` waiting on an event gets `signal`: it emits `shutdown` naming it, then exits
/// with 128 + the signal's number.
fn a_signal_emits_the_shutdown_event_before_exiting(signal: &str, code: i32) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = skillgate_command(dir.path())
        .args([
            "run",
            "event-wait",
            "--topic",
            "never",
            "--timeout",
            "600000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // Wait until the store exists (the process is up), then ask it to stop.
    let db = dir.path().join(".skillgate/events.db");
    for _ in 0..300 {
        if db.is_file() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let name = signal.trim_start_matches("SIG");
    let sent = std::process::Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let exit = child.wait().expect("wait").code();
    assert_eq!(exit, Some(code), "exit code for {signal}");
    let events = lines(&skillgate(dir.path(), &["events", "replay", "shutdown"]));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "signal");
    assert_eq!(events[0]["data"]["signal"], signal);
}

#[test]
fn sigterm_emits_the_shutdown_event_before_exiting() {
    a_signal_emits_the_shutdown_event_before_exiting("SIGTERM", 143);
}

#[test]
fn sigint_emits_the_shutdown_event_before_exiting() {
    a_signal_emits_the_shutdown_event_before_exiting("SIGINT", 130);
}

#[test]
fn database_url_is_the_store_when_none_is_configured_and_store_wins_over_it() {
    let Some(store) = Store::all().into_iter().find(|s| s.url.is_some()) else {
        return;
    };
    let url = store.url.clone().unwrap();
    // A password in the URL (trust authentication ignores it) must never be printed.
    let with_password = url.replacen("://postgres@", "://postgres:pw-s3cret@", 1);
    let dir = tempfile::tempdir().unwrap();
    let migrate = |env: &[(&str, &str)], args: &[&str]| {
        let mut command = skillgate_command(dir.path());
        command.args(args).arg("migrate");
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().expect("run skillgate")
    };
    let out = migrate(&[("DATABASE_URL", &with_password)], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.starts_with("postgres event store"), "{said}");
    assert!(!said.contains("pw-s3cret"), "{said}");
    assert!(!dir.path().join(".skillgate/events.db").exists());
    let out = migrate(&[("DATABASE_URL", &with_password)], &["--store", "memory"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("memory event store"));
    let out = migrate(
        &[
            ("DATABASE_URL", &with_password),
            ("SKILLGATE_STORE", "memory"),
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("memory event store"));
}

/// Processes that open a new SQLite store at the same moment (CLI commands beside a starting
/// server) all find it migrated, none fails on the migration another one applied first.
#[test]
fn processes_opening_a_new_sqlite_store_at_once_all_migrate_it() {
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let children: Vec<_> = (0..6)
            .map(|_| {
                skillgate_command(dir.path())
                    .arg("migrate")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
        }
    }
}
