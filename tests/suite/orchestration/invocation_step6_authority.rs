//! Spec 02, Invocation step 6: finding the tool's authority.

use serde_json::json;
use skillgate::InvokeOptions;

use super::out_of;
use crate::support::common::{Project, Trace, skill, with_args};

#[tokio::test]
async fn a_project_main_skill_governs_the_skills_under_skills() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  mark: from-main\n---\nThe project.",
    )
    .skill("s.skill.md", "---\nname: s\n---\nS body");
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(skill("loose", "", &trace))
        .build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!("S body"));
    assert_eq!(trace.take(), [r#"mark="from-main""#]);
    // A tool outside the project folder is not governed by it.
    kernel
        .invoke("loose", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["loose"]);
}

#[tokio::test]
async fn a_main_skill_file_without_role_main_is_not_an_authority() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  mark: from-main\n---\nNot a main skill.",
    )
    .skill("s.skill.md", "---\nname: s\n---\nS body");
    let trace = Trace::default();
    let kernel = p.builder().native(with_args("mark", &trace)).build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!("S body"));
    assert!(trace.take().is_empty());
}
