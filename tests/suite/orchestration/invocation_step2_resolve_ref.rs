//! Spec 02, Invocation step 2: the ref is resolved on the current search paths, and an unknown
//! one is an error.

use serde_json::json;
use skillgate::{ErrorKind, InvokeOptions};

use super::out_of;
use crate::support::common::Project;

#[tokio::test]
async fn an_earlier_search_path_shadows_a_later_one() {
    let p = Project::new();
    p.write("first/same.skill.md", "---\nname: same\n---\nfrom first")
        .write("second/same.skill.md", "---\nname: same\n---\nfrom second")
        .write(
            "second/only.skill.md",
            "---\nname: only\n---\nonly in second",
        )
        .skill("hello.skill.md", "---\nname: hello\n---\nproject hello");
    let kernel = p
        .builder()
        .skill_dirs(vec![
            p.path().join("first"),
            p.path().join("second"),
            p.path().join("skills"),
        ])
        .build();
    let run = |name: &'static str| kernel.invoke(name, json!({}), InvokeOptions::default());
    assert_eq!(out_of(run("same").await), json!("from first"));
    assert_eq!(out_of(run("only").await), json!("only in second"));
    // The project's skills come before the bundled ones.
    assert_eq!(out_of(run("hello").await), json!("project hello"));
}

#[tokio::test]
async fn an_unknown_ref_is_not_found_and_suggests_close_names() {
    let p = Project::new();
    let err = p
        .kernel()
        .invoke("helo", json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.message().contains("`hello`"), "{}", err.message());
    let suggestions = &err.data().expect("data")["suggestions"];
    assert!(
        suggestions
            .as_array()
            .is_some_and(|s| s.contains(&json!("hello"))),
        "{suggestions}"
    );
}
