//! Which provider skill runs the loop (spec 05): `model.agent` when the metadata names one;
//! otherwise a project's `agent-strands` skill; otherwise the built-in provider, which answers
//! to `agent-strands` and `agent-model` alike. The provider is given `agentSignal`, aborted when
//! the agent fails or its pipeline is aborted, and stops with it.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::support::model_fake::{ModelFake, Reply};

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

/// A `.skill.js` provider `name` with this body (`ctx`, `args` in scope).
fn provider_with(name: &str, body: &str) -> String {
    format!(
        "export const frontmatter = {{ name: '{name}' }};\n\
         export default async (ctx, args) => {{\n{body}\n}};\n"
    )
}

#[tokio::test]
async fn the_provider_is_given_agent_signal_and_its_own_run_signal_is_not_aborted() {
    let fake = ModelFake::start(vec![]).await;
    let project = Project::new();
    project.skill(
        "agent-strands.skill.js",
        &provider_with(
            "agent-strands",
            "return { agentSignal: args.agentSignal, runSignal: ctx.run.signal };",
        ),
    );
    project.skill("task.skill.md", &agent_skill("task", &fake, "", ""));
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "task", json!({})).await.unwrap();
    assert_eq!(
        out,
        Some(json!({ "agentSignal": { "aborted": false }, "runSignal": { "aborted": false } }))
    );
}

#[tokio::test]
async fn a_provider_that_ignores_a_failed_hook_is_stopped_and_the_agent_fails_with_the_hooks_error()
{
    // A careless provider: it swallows the hook's refusal and goes on calling it, only
    // stopping when its own signal says so.
    let fake = ModelFake::start(vec![]).await;
    let project = Project::new();
    project.skill(
        "agent-strands.skill.js",
        &provider_with(
            "agent-strands",
            "for (let turn = 1; ; turn++) {\n\
               try { await ctx.manager.invoke(args.hookRef, { type: 'turn-start', turnNumber: turn }); } catch (e) {}\n\
               if (ctx.run.signal.aborted) return 'stopped by the signal';\n\
             }",
        ),
    );
    project.skill(
        "task.skill.md",
        &agent_skill("task", &fake, "", "    maxTurns: 2\n"),
    );
    let kernel = kernel(&project, &Probe::default());
    let out = tokio::time::timeout(Duration::from_secs(30), run(&kernel, "task", json!({})))
        .await
        .expect("the agent never stopped its provider");
    let err = out.unwrap_err();
    assert!(err.message().contains("maxTurns limit (2)"), "{err}");
}

#[tokio::test]
async fn aborting_the_pipeline_stops_the_built_in_provider_in_the_middle_of_a_model_call() {
    let fake = ModelFake::start(vec![Reply::Stall(Duration::from_secs(120))]).await;
    let project = Project::new();
    project.skill("task.skill.md", &agent_skill("task", &fake, "", ""));
    let kernel = kernel(&project, &Probe::default());
    let signal = CancellationToken::new();
    let mut options = InvokeOptions::default();
    options.context.signal = Some(signal.clone());
    let call = tokio::spawn(async move { kernel.invoke("task", json!({}), options).await });
    fake.asked().await;
    signal.cancel();
    let out = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the model call went on after the pipeline was aborted")
        .unwrap();
    let err = out.expect_err("an aborted run answers an error");
    assert_eq!(err.kind(), skillgate::ErrorKind::Aborted, "{err}");
}
