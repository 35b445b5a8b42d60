//! `skillgate runs list|show|retry` over the store and against a server (`--server`),
//! `skillgate dead` against a server, and `skillgate run --record`.

use serde_json::{Value, json};
use skillgate::events::KernelBus;

use crate::support::common::{Project, skillgate, stderr, stdout};
use crate::support::server::{TestServer, with_keys};

fn listed(project: &Project, args: &[&str]) -> Value {
    let mut all = vec!["runs", "list", "--json"];
    all.extend_from_slice(args);
    let out = skillgate(project.path(), &all);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("a JSON page")
}

#[test]
fn a_command_line_run_is_recorded_only_with_record_and_read_back_by_skillgate_runs() {
    let project = Project::new();
    project.skill(
        "hello.skill.md",
        "---\nname: hello\n---\nHello, :arg[name]!",
    );
    let out = skillgate(project.path(), &["run", "hello", "--name", "Unrecorded"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skillgate(
        project.path(),
        &["run", "--record", "hello", "--name", "Ada"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let page = listed(&project, &[]);
    let runs = page["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{page}");
    assert_eq!(runs[0]["door"], "cli");
    assert_eq!(runs[0]["principal"], "project");
    assert_eq!(runs[0]["status"], "ok");
    let id = runs[0]["id"].as_str().unwrap();
    let out = skillgate(project.path(), &["runs", "show", id, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(run["args"]["name"], "Ada");
    assert_eq!(run["result"], "Hello, Ada!");
    // The table names the run too.
    let out = skillgate(project.path(), &["runs", "list"]);
    assert!(stdout(&out).contains(id), "{}", stdout(&out));
    // Filters that match nothing list nothing.
    assert!(
        listed(&project, &["--status", "failed"])["runs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_unknown_run_or_a_bad_filter_is_an_error_naming_it() {
    let project = Project::new();
    project.skill("hello.skill.md", "---\nname: hello\n---\nhi");
    let out = skillgate(project.path(), &["runs", "show", "0000000000000000"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no run `0000000000000000`"),
        "{}",
        stderr(&out)
    );
    let out = skillgate(project.path(), &["runs", "list", "--status", "done"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("`status`"), "{}", stderr(&out));
}

#[test]
fn runs_retry_runs_a_recorded_run_again_here_as_a_new_run_linked_to_it() {
    let project = Project::new();
    project.skill(
        "hello.skill.md",
        "---\nname: hello\n---\nHello, :arg[name]!",
    );
    let out = skillgate(
        project.path(),
        &["run", "--record", "hello", "--name", "Ada"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let first = listed(&project, &[]);
    let old = first["runs"][0]["id"].as_str().unwrap().to_string();
    let out = skillgate(project.path(), &["runs", "retry", &old]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Hello, Ada!");
    let page = listed(&project, &[]);
    let runs = page["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{page}");
    // Newest first: the retry, linked to the run it repeats.
    assert_eq!(runs[0]["parent"], json!(old));
    assert_eq!(runs[0]["door"], "cli");
    assert_eq!(runs[0]["status"], "ok");
    let out = skillgate(project.path(), &["runs", "retry", "0000000000000000"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no run `0000000000000000`"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_dead_ask_a_running_server_with_its_key() {
    let project = Project::new();
    project.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets.\n---\nHello, :arg[name]!",
    );
    let server = TestServer::start(project, with_keys()).await;
    let response = server
        .post_json_as("sg_ci_key", "/invoke/hello", &json!({ "name": "Ada" }))
        .await;
    assert_eq!(response.status(), 200);
    server.kernel.bus().runs().settled_at_least(1).await;
    let url = server.url("");
    let here = Project::new();
    let ask = move |args: Vec<String>| {
        let here = here.path().to_path_buf();
        async move {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                skillgate(&here, &args)
            })
            .await
            .unwrap()
        }
    };
    let with = |args: &[&str], key: &str| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--server".into(), url.clone(), "--key".into(), key.into()]);
        all
    };
    let out = ask(with(&["runs", "list", "--json"], "sg_ops_key")).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let page: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(page["runs"][0]["principal"], "key:ci", "{page}");
    let id = page["runs"][0]["id"].as_str().unwrap().to_string();
    let out = ask(with(&["runs", "retry", &id], "sg_ops_key")).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Hello, Ada!"), "{}", stdout(&out));
    // The server's refusal is told with its reason.
    let out = ask(with(&["runs", "retry", &id], "sg_ci_key")).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("403"), "{}", stderr(&out));
    assert!(stderr(&out).contains("admin"), "{}", stderr(&out));
    let out = ask(with(&["dead", "list", "--json"], "sg_ops_key")).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let letters: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(letters, json!({ "letters": [] }));
}
