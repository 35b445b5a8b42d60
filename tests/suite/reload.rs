//! Hot reload: `skillgate serve` picks up edited skills (watched, and on SIGHUP), a broken edit
//! keeps the running set and `/readyz` shows it, and runs in flight finish on the skills they
//! started with.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::InvokeOptions;

use crate::support::common::{Project, eventually, native, sighup};
use crate::support::process::{Served, serve};

fn greet(version: &str) -> String {
    format!("---\nname: greet\ndescription: Greets.\n---\nHello from {version}.\n")
}

/// `greet` broken by an edit (its metadata never closes, on line 3).
const BROKEN_GREET: &str = "---\nname: greet\nmetadata: [unclosed\n---\nHello from broken.\n";

async fn invoke(served: &Served, skill: &str) -> Value {
    served.post(&format!("/invoke/{skill}"), &json!({})).await.1
}

async fn readyz(served: &Served) -> Value {
    served.get("/readyz").await
}

/// `/readyz` once it reports a failed reload.
async fn failed_reload(served: &Served) -> Value {
    eventually("readyz reports the failed reload", || async {
        let ready = readyz(served).await;
        (ready["reload"]["ok"] == false, ready)
    })
    .await
}

#[tokio::test]
async fn an_edited_skill_is_served_to_new_requests_without_a_restart() {
    let project = Project::new();
    project.skill("greet.skill.md", &greet("v1"));
    let served = serve(project.path(), &["--bind", "127.0.0.1:0"], &[]);
    assert_eq!(invoke(&served, "greet").await["result"], "Hello from v1.\n");
    project.skill("greet.skill.md", &greet("v2"));
    eventually("the edit is served", || async {
        let body = invoke(&served, "greet").await;
        (body["result"] == "Hello from v2.\n", body)
    })
    .await;
    // A skill added to the folder is found too.
    project.skill(
        "added.skill.md",
        "---\nname: added\ndescription: New.\n---\nI am new.\n",
    );
    eventually("the new skill is served", || async {
        let body = invoke(&served, "added").await;
        (body["result"] == "I am new.\n", body)
    })
    .await;
    let ready = readyz(&served).await;
    assert_eq!(ready["reload"]["ok"], true, "{ready}");
    assert_eq!(ready["reload"]["trigger"], "watch", "{ready}");
}

#[tokio::test]
async fn a_broken_edit_keeps_the_running_skills_logs_where_and_readyz_shows_it() {
    let project = Project::new();
    project.skill("greet.skill.md", &greet("v1"));
    let served = serve(project.path(), &["--bind", "127.0.0.1:0"], &[]);
    project.skill("greet.skill.md", BROKEN_GREET);
    let ready = failed_reload(&served).await;
    assert_eq!(ready["reload"]["failures"], json!(["greet"]), "{ready}");
    // The old set still serves, and the server stays ready.
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(invoke(&served, "greet").await["result"], "Hello from v1.\n");
    // The log names the file and the line.
    let line = served
        .logged("skills not reloaded", Duration::from_secs(10))
        .unwrap_or_else(|seen| panic!("no reload error logged: {seen:?}"));
    assert!(line.contains("greet.skill.md:3"), "{line}");
    // Fixed, it is picked up.
    project.skill("greet.skill.md", &greet("v3"));
    eventually("the fix is served", || async {
        let body = invoke(&served, "greet").await;
        (body["result"] == "Hello from v3.\n", body)
    })
    .await;
    assert_eq!(readyz(&served).await["reload"]["ok"], true);
}

#[tokio::test]
async fn reload_failures_name_only_the_skills_the_edit_broke() {
    let project = Project::new();
    project.skill("greet.skill.md", &greet("v1"));
    // Broken before the server started: it blocks no reload and is not this edit's failure.
    project.skill(
        "old.skill.md",
        "---\nname: old\nmetadata: [unclosed\n---\nNever loaded.\n",
    );
    let served = serve(project.path(), &["--bind", "127.0.0.1:0"], &[]);
    project.skill("greet.skill.md", BROKEN_GREET);
    let ready = failed_reload(&served).await;
    assert_eq!(ready["reload"]["failures"], json!(["greet"]), "{ready}");
}

#[tokio::test]
async fn sighup_reloads_the_skills_when_watching_is_off() {
    let project = Project::new();
    project.skill("greet.skill.md", &greet("v1"));
    let served = serve(
        project.path(),
        &["--bind", "127.0.0.1:0", "--watch", "false"],
        &[],
    );
    project.skill("greet.skill.md", &greet("v2"));
    sighup(&served.child);
    eventually("SIGHUP reloads", || async {
        let body = invoke(&served, "greet").await;
        (body["result"] == "Hello from v2.\n", body)
    })
    .await;
    let ready = readyz(&served).await;
    assert_eq!(ready["reload"]["trigger"], "SIGHUP", "{ready}");
    // SIGHUP did not end the process: it stops cleanly on SIGTERM.
    let (code, _) = served.stop();
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_finishes_on_the_skills_it_started_with() {
    let project = Project::new();
    project.skill("greet.skill.md", &greet("v1"));
    let gate = Arc::new(tokio::sync::Notify::new());
    let waiting = Arc::new(tokio::sync::Notify::new());
    let (gate2, waiting2) = (gate.clone(), waiting.clone());
    let kernel = project
        .builder()
        .native(native(
            "name: slow-caller\ndescription: Waits, then invokes greet.",
            move |ctx, _args| {
                let (gate, waiting) = (gate2.clone(), waiting2.clone());
                async move {
                    let opened = gate.notified();
                    waiting.notify_one();
                    opened.await;
                    let out = ctx
                        .invoke("greet", json!({}), InvokeOptions::default())
                        .await?;
                    Ok(out.map(|v| (*v).clone()))
                }
            },
        ))
        .build();
    let run = tokio::spawn({
        let kernel = kernel.clone();
        async move {
            kernel
                .invoke("slow-caller", json!({}), InvokeOptions::default())
                .await
        }
    });
    waiting.notified().await;
    project.skill("greet.skill.md", &greet("v2"));
    kernel.registry().try_reload().expect("the edit loads");
    let fresh = kernel
        .invoke("greet", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(fresh.as_deref(), Some(&json!("Hello from v2.\n")));
    gate.notify_one();
    let old = run.await.unwrap().unwrap();
    assert_eq!(old.as_deref(), Some(&json!("Hello from v1.\n")));
}
