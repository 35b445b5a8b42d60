//! `skillgate runs list|show` over the store, and `skillgate run --record`.

use serde_json::Value;

use crate::support::common::{Project, skillgate, stderr, stdout};

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
