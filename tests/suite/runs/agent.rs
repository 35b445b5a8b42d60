//! An agent run in the runs record: each model call (a turn) with its provider, model, tokens
//! and why the model stopped, and the tokens of the run in all, from the fake model server over
//! its real wire protocol; its log events when it failed.

use serde_json::{Value, json};
use skillgate::events::KernelBus;

use crate::agent::{ADD, agent_skill, code_turn};
use crate::console::support::Visitor;
use crate::support::common::Project;
use crate::support::model_fake::{ModelFake, Reply, openai_text};
use crate::support::server::{TestServer, config};

#[tokio::test]
async fn an_agent_run_is_recorded_with_its_turns_and_their_tokens() {
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "return await ctx.manager.invoke('add', { a: 2, b: 2 });",
        ),
        Reply::Stream(openai_text(&["It is ", "four."], 10, 5)),
    ])
    .await;
    let project = Project::new();
    project.skill("add.skill.js", ADD);
    project.skill(
        "counter.skill.md",
        &agent_skill("counter", &fake, "  allowed-tools: add\n", ""),
    );
    let server = TestServer::start(project, config()).await;
    let response = server
        .post_json("/invoke/counter", &json!({ "who": "Ada" }))
        .await;
    assert_eq!(response.status(), 200);
    server.kernel.bus().runs().settled_at_least(1).await;
    let page: Value = server.get("/runs?door=http").await.json().await.unwrap();
    let id = page["runs"][0]["id"].as_str().unwrap();
    let run: Value = server
        .get(&format!("/runs/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let turns = run["turns"].as_array().expect("the turns are recorded");
    assert_eq!(turns.len(), 2, "{run}");
    for turn in turns {
        assert_eq!(
            (&turn["provider"], &turn["model"]),
            (&json!("openai"), &json!("fake-1")),
            "{turn}"
        );
        assert!(turn["durationMs"].as_f64().unwrap() >= 0.0);
    }
    assert_eq!(
        (
            &turns[1]["inputTokens"],
            &turns[1]["outputTokens"],
            &turns[1]["stop"]
        ),
        (&json!(10), &json!(5), &json!("end-turn")),
        "{run}"
    );
    assert_eq!(run["tokens"], json!({ "input": 10, "output": 5 }));
    // The console's page of the run shows its model calls.
    let mut local = Visitor::new(&server);
    let html = local.page(&format!("/console/runs/{id}")).await;
    assert!(html.contains("id=\"turns\""), "{html}");
    assert!(
        html.contains("fake-1") && html.contains("10 in, 5 out"),
        "{html}"
    );
}

#[tokio::test]
async fn a_failed_run_keeps_its_log_events() {
    let project = Project::new();
    project.skill(
        "noisy.skill.js",
        "export const frontmatter = { description: 'Logs, then fails.' };\n\
         export default async (ctx) => { console.warn('the cache is cold'); throw new Error('no luck'); };\n",
    );
    let server = TestServer::start(project, config()).await;
    let response = server.post_json("/invoke/noisy", &json!({})).await;
    assert_eq!(response.status(), 500);
    server.kernel.bus().runs().settled_at_least(1).await;
    let page: Value = server.get("/runs").await.json().await.unwrap();
    let id = page["runs"][0]["id"].as_str().unwrap();
    let run: Value = server
        .get(&format!("/runs/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let logs = run["logs"].as_array().expect("the logs are kept");
    assert!(
        logs.iter()
            .any(|l| l["text"] == "the cache is cold" && l["level"] == "warn"),
        "{run}"
    );
}
