//! Which provider skill runs the loop (spec 05): `model.agent` when the metadata names one;
//! otherwise a project's `agent-strands` skill; otherwise the built-in provider, which answers
//! to `agent-strands` and `agent-model` alike.

use serde_json::json;

use super::*;
use crate::model_fake::ModelFake;

/// A `.skill.js` provider named `name` that answers without a model: `<name> ran <skill>`.
fn provider(name: &str) -> String {
    format!(
        "export const frontmatter = {{ name: '{name}' }};\n\
         export default async (ctx, args) => '{name} ran ' + args.skillName;\n"
    )
}

#[tokio::test]
async fn a_projects_agent_strands_skill_runs_the_loop_when_model_agent_is_unset() {
    let fake = ModelFake::start(vec![text_turn("the built-in provider answered")]).await;
    let project = Project::new();
    project.skill("agent-strands.skill.js", &provider("agent-strands"));
    project.skill("task.skill.md", &agent_skill("task", &fake, "", ""));
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "task", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("agent-strands ran task")));
    assert!(
        fake.requests().is_empty(),
        "the built-in provider called the model"
    );
}

#[tokio::test]
async fn model_agent_wins_over_a_projects_agent_strands_skill() {
    let fake = ModelFake::start(vec![text_turn("the built-in provider answered")]).await;
    let project = Project::new();
    project.skill("agent-strands.skill.js", &provider("agent-strands"));
    project.skill("my-provider.skill.js", &provider("my-provider"));
    project.skill(
        "task.skill.md",
        &agent_skill("task", &fake, "", "    agent: my-provider\n"),
    );
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "task", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("my-provider ran task")));
}

#[tokio::test]
async fn without_a_project_agent_strands_both_names_mean_the_built_in_provider() {
    for (name, named) in [
        ("unset", ""),
        ("agent-strands", "    agent: agent-strands\n"),
        ("agent-model", "    agent: agent-model\n"),
    ] {
        let fake = ModelFake::start(vec![text_turn("the built-in provider answered")]).await;
        let project = Project::new();
        project.skill("task.skill.md", &agent_skill("task", &fake, "", named));
        let kernel = kernel(&project, &Probe::default());
        let out = run(&kernel, "task", json!({})).await.unwrap();
        assert_eq!(
            out,
            Some(json!("the built-in provider answered")),
            "model.agent {name}"
        );
        assert_eq!(fake.requests().len(), 1, "model.agent {name}");
    }
}
