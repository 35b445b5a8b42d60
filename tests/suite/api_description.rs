//! The served API descriptions match what is served: schemathesis (`st run --checks all`, a
//! pinned seed) against `/openapi.yaml` and the project's `/openapi.json`, with keys off and
//! on, on `skillgate serve` of the bundled `skills/` (their `ask` talks to a local fake model).
//! `scripts/test` installs schemathesis into a virtual environment and names its `st` in
//! `SKILLGATE_TEST_SCHEMATHESIS`; its settings are `tests/schemathesis/schemathesis.toml`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::model_fake::{ModelFake, Reply, openai_text};
use crate::support::process::{Served, serve};

/// The key the keys-on runs send (a plain key: the control plane is not listed to it).
const KEY: &str = "sg_schema_key";

/// Schemathesis's `st`, or `None` (the test is skipped) where it is not installed.
fn schemathesis() -> Option<PathBuf> {
    crate::support::common::provided_tool(
        "SKILLGATE_TEST_SCHEMATHESIS",
        "SKILLGATE_REQUIRE_SCHEMATHESIS",
        "schemathesis",
    )
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `skillgate serve` of a copy of the bundled `skills/`, keys on or off. Runs time out after
/// 3 s, so a long poll a case starts answers in under 3 s.
fn serve_bundled(project: &Path, fake: &ModelFake, keys: bool) -> Served {
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("skills"),
        &project.join("skills"),
    );
    let hash = skillgate::gateway::keys::hash_key(KEY);
    let keys_arg = format!("app={hash}");
    let mut args = vec![
        "--bind",
        "127.0.0.1:0",
        "--rate-limit",
        "0",
        "--timeout",
        "3",
    ];
    if keys {
        args.extend(["--api-keys", keys_arg.as_str()]);
    }
    let base = fake.base();
    serve(
        project,
        &args,
        &[
            ("OPENAI_BASE_URL", base.as_str()),
            ("OPENAI_API_KEY", "sk-fake"),
        ],
    )
}

/// `st run --checks all` of `document` on `served`; panics with schemathesis's report unless it
/// found nothing.
fn check(st: &Path, served: &Served, document: &str, key: Option<&str>) {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis/schemathesis.toml");
    // Run where its cache of earlier failures (which it replays first) cannot follow it from
    // one run to the next: each run is the seed's cases only.
    let cwd = tempfile::tempdir().unwrap();
    let mut command = Command::new(st);
    command
        .current_dir(cwd.path())
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(served.url(document))
        .args(["--checks", "all", "--seed", "1", "--max-examples", "20"])
        // One worker: Python 3.11's `ast.parse`, which hypothesis calls while it generates, is
        // not safe across threads ("AST constructor recursion depth mismatch", CPython
        // gh-106905), and a second worker made the run fail now and then for that alone.
        .args(["--workers", "1", "--no-color"]);
    if let Some(key) = key {
        command.args(["-H", &format!("Authorization: Bearer {key}")]);
    }
    let out = command.output().expect("run schemathesis");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found mismatches in {document} (keys {}):\n{report}\n{}",
        if key.is_some() { "on" } else { "off" },
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report.contains("passed"),
        "schemathesis ran no case of {document}:\n{report}"
    );
}

async fn described_as_served(keys: bool) {
    let Some(st) = schemathesis() else { return };
    let fake = ModelFake::always(Reply::Stream(openai_text(&["Hello there."], 5, 2))).await;
    let project = tempfile::tempdir().unwrap();
    let served = serve_bundled(project.path(), &fake, keys);
    let key = keys.then_some(KEY);
    let served = tokio::task::spawn_blocking(move || {
        check(&st, &served, "/openapi.yaml", key);
        check(&st, &served, "/openapi.json", key);
        served
    })
    .await
    .unwrap();
    served.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_api_documents_describe_what_is_served_with_keys_off() {
    described_as_served(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_api_documents_describe_what_is_served_with_keys_on() {
    described_as_served(true).await;
}
