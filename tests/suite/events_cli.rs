//! The event store from the command line: `migrate`, `events tail|replay|dead`, and the
//! `shutdown` topic on SIGTERM. Each test uses the embedded SQLite store of a fresh project.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

fn skillgate(project: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skillgate"))
        .arg("--project")
        .arg(project)
        .args(args)
        .env_remove("SKILLGATE_STORE")
        .output()
        .expect("run skillgate")
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON envelope per line"))
        .collect()
}

fn emit(project: &std::path::Path, topic: &str, n: u64) -> Value {
    let out = skillgate(
        project,
        &[
            "run",
            "event-emit",
            "--topic",
            topic,
            "--data",
            &format!("{{\"n\":{n}}}"),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("envelope")
}

#[test]
fn migrate_creates_the_embedded_store_in_the_project() {
    let dir = tempfile::tempdir().unwrap();
    let out = skillgate(dir.path(), &["migrate"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("sqlite"));
    assert!(dir.path().join(".skillgate/events.db").is_file());
}

#[test]
fn replay_prints_the_buffer_in_emit_order_and_from_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let first = emit(dir.path(), "audit", 1);
    emit(dir.path(), "audit", 2);
    emit(dir.path(), "audit", 3);
    let all = lines(&skillgate(dir.path(), &["events", "replay", "audit"]));
    let ns: Vec<u64> = all
        .iter()
        .map(|e| e["data"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, [1, 2, 3]);
    let id = first["id"].as_str().unwrap();
    let after = lines(&skillgate(
        dir.path(),
        &["events", "replay", "audit", "--from", id],
    ));
    let ns: Vec<u64> = after
        .iter()
        .map(|e| e["data"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, [2, 3]);
    let out = skillgate(
        dir.path(),
        &["events", "replay", "audit", "--from", "ffffffff"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`ffffffff` is not in the buffer"));
}

#[test]
fn tail_prints_the_last_events() {
    let dir = tempfile::tempdir().unwrap();
    for n in 1..=4 {
        emit(dir.path(), "feed", n);
    }
    let out = skillgate(
        dir.path(),
        &["events", "tail", "feed", "--last", "2", "--no-follow"],
    );
    let ns: Vec<u64> = lines(&out)
        .iter()
        .map(|e| e["data"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, [3, 4]);
}

#[test]
fn dead_lists_dead_letters_and_requeue_puts_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = skillgate(dir.path(), args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    run(&["run", "event-subscribe", "--topic", "jobs", "--queue", "w"]);
    emit(dir.path(), "jobs", 7);
    // Nack it until it uses up its five deliveries.
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
        let id = got[0]["id"].as_str().expect("delivered").to_string();
        run(&[
            "run",
            "event-ack",
            "--topic",
            "jobs",
            "--queue",
            "w",
            "--id",
            &id,
            "--nack",
        ]);
    }
    let empty: Value = serde_json::from_slice(
        &run(&[
            "run",
            "event-wait",
            "--topic",
            "jobs",
            "--queue",
            "w",
            "--timeout",
            "0",
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(empty, serde_json::json!([]));
    let dead = lines(&run(&["events", "dead", "jobs"]));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["queue"], "w");
    assert_eq!(dead[0]["attempts"], 5);
    assert_eq!(dead[0]["event"]["data"]["n"], 7);
    run(&["events", "dead", "jobs", "--requeue"]);
    assert!(lines(&run(&["events", "dead", "jobs"])).is_empty());
    let back: Value = serde_json::from_slice(
        &run(&[
            "run",
            "event-wait",
            "--topic",
            "jobs",
            "--queue",
            "w",
            "--timeout",
            "2000",
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(back[0]["data"]["n"], 7);
}

#[test]
fn sigterm_emits_the_shutdown_event_before_exiting() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_skillgate"))
        .arg("--project")
        .arg(dir.path())
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
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let code = child.wait().expect("wait").code();
    assert_eq!(code, Some(143), "exit code for SIGTERM");
    let events = lines(&skillgate(dir.path(), &["events", "replay", "shutdown"]));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "signal");
    assert_eq!(events[0]["data"]["signal"], "SIGTERM");
}
