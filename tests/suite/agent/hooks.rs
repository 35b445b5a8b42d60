//! The model hook (spec 04): middleware skills around each model call see a ModelContext in
//! `locals.model` and may change the model, the messages and the tools, skip the call with a
//! response of their own, or abort the run; several compose in order.

use serde_json::json;

use super::*;
use crate::support::model_fake::ModelFake;

fn hook(name: &str, body: &str) -> String {
    format!(
        "export const frontmatter = {{ name: '{name}', metadata: {{ role: 'middleware', visibility: 'hidden' }} }};\nexport default async function (ctx) {{\n  const call = ctxTarget(ctx);\n{body}\n}}\n"
    )
}

fn hooked(fake: &ModelFake, name: &str, hooks: &[&str]) -> String {
    agent_skill(
        name,
        fake,
        "",
        &format!("    hooks: [{}]\n", hooks.join(", ")),
    )
}

#[tokio::test]
async fn a_model_hook_that_sets_the_model_changes_it_for_that_call() {
    let fake = ModelFake::start(vec![text_turn("cheap answer")]).await;
    let project = Project::new();
    project.skill(
        "cheap.skill.js",
        &hook(
            "cheap",
            "  call.locals.model.model = 'fake-cheap';\n  return await call.manager.next();",
        ),
    );
    project.skill("thrifty.skill.md", &hooked(&fake, "thrifty", &["cheap"]));
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "thrifty", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("cheap answer")));
    assert_eq!(fake.requests()[0].body["model"], "fake-cheap");
}

#[tokio::test]
async fn a_model_hook_that_skips_the_call_answers_without_the_model() {
    let fake = ModelFake::start(vec![]).await;
    let project = Project::new();
    project.skill(
        "cache.skill.js",
        &hook(
            "cache",
            "  if (call.locals.model.turnIndex === 0) { call.manager.finish({ text: 'from the cache' }); return; }\n  return await call.manager.next();",
        ),
    );
    project.skill("cached.skill.md", &hooked(&fake, "cached", &["cache"]));
    let probe = Probe::default();
    let kernel = kernel(&project, &probe);
    let out = run(&kernel, "cached", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("from the cache")));
    assert!(fake.requests().is_empty(), "the model was never called");
    assert!(probe.kinds().contains(&"turn-end".to_string()));
}

#[tokio::test]
async fn model_hooks_compose_in_order_over_messages_and_tools() {
    let fake = ModelFake::start(vec![text_turn("done")]).await;
    let project = Project::new();
    // The outer hook adds a system message and a user message; the inner one, which runs
    // after it, sees them and removes the invoke tool.
    project.skill(
        "outer.skill.js",
        &hook(
            "outer",
            "  const m = call.locals.model;\n  call.locals.model.messages = [{ role: 'system', content: 'Be brief.' }, ...m.messages, { role: 'user', content: 'P.S. hello' }];\n  return await call.manager.next();",
        ),
    );
    project.skill(
        "inner.skill.js",
        &hook(
            "inner",
            "  const m = call.locals.model;\n  if (m.messages[0].content !== 'Be brief.') throw new Error('inner ran before outer');\n  call.locals.model.toolDefs = m.toolDefs.filter(t => t.name !== 'invoke');\n  return await call.manager.next();",
        ),
    );
    project.skill(
        "layered.skill.md",
        &hooked(&fake, "layered", &["outer", "inner"]),
    );
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "layered", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("done")));
    let body = &fake.requests()[0].body;
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], "Be brief.");
    assert_eq!(messages.last().unwrap()["content"], "P.S. hello");
    assert!(
        body.get("tools")
            .is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)),
        "the invoke tool was removed: {body}"
    );
}

#[tokio::test]
async fn a_model_hook_that_aborts_ends_the_run_with_its_reason() {
    let fake = ModelFake::start(vec![text_turn("never")]).await;
    let project = Project::new();
    project.skill(
        "guard.skill.js",
        &hook("guard", "  throw new Error('over the monthly spend');"),
    );
    project.skill("guarded.skill.md", &hooked(&fake, "guarded", &["guard"]));
    let kernel = kernel(&project, &Probe::default());
    let err = run(&kernel, "guarded", json!({})).await.unwrap_err();
    assert!(err.message().contains("over the monthly spend"), "{err}");
    assert!(fake.requests().is_empty());
}

/// A model hook that ends each call's messages with `mark <turnIndex>/<callIndex>/<sessionId>`.
const MARK: &str = "  const m = call.locals.model;\n  call.locals.model.messages = [...m.messages, { role: 'user', content: `mark ${m.turnIndex}/${m.callIndex}/${m.sessionId}` }];\n  return await call.manager.next();";

#[tokio::test]
async fn the_model_context_counts_conversation_turns_and_the_calls_within_each() {
    // Two requests of one conversation, three model calls each.
    let fake = ModelFake::start(vec![
        code_turn("a1", "return 1;"),
        code_turn("a2", "return 2;"),
        text_turn("first answer"),
        code_turn("b1", "return 3;"),
        code_turn("b2", "return 4;"),
        text_turn("second answer"),
    ])
    .await;
    let project = Project::new();
    // Each call's messages end with where the hook saw it; the edit is that call's alone.
    project.skill("mark.skill.js", &hook("mark", MARK));
    project.skill(
        "chat.skill.md",
        &agent_skill(
            "chat",
            &fake,
            "  session: { key: conv-1 }\n",
            "    hooks: [mark]\n",
        ),
    );
    let kernel = kernel(&project, &Probe::default());
    assert_eq!(
        run(&kernel, "chat", json!({})).await.unwrap(),
        Some(json!("first answer"))
    );
    assert_eq!(
        run(&kernel, "chat", json!({})).await.unwrap(),
        Some(json!("second answer"))
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 6);
    let marks: Vec<Vec<String>> = requests
        .iter()
        .map(|r| {
            r.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|m| m["content"].as_str())
                .filter(|c| c.starts_with("mark "))
                .map(str::to_string)
                .collect()
        })
        .collect();
    let expected = [
        "0/0", "0/1", "0/2", // the first turn
        "1/0", "1/1", "1/2", // the second
    ];
    for (n, want) in expected.iter().enumerate() {
        assert_eq!(
            marks[n],
            vec![format!("mark {want}/conv-1")],
            "call {n}: one mark, this call's"
        );
    }
}

#[tokio::test]
async fn without_a_kept_conversation_the_session_id_is_the_root_runs_and_every_run_is_turn_0() {
    let fake = ModelFake::start(vec![text_turn("one"), text_turn("two")]).await;
    let project = Project::new();
    project.skill("mark.skill.js", &hook("mark", MARK));
    project.skill("solo.skill.md", &hooked(&fake, "solo", &["mark"]));
    let kernel = kernel(&project, &Probe::default());
    run(&kernel, "solo", json!({})).await.unwrap();
    run(&kernel, "solo", json!({})).await.unwrap();
    let marks: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| {
            let messages = r.body["messages"].as_array().unwrap();
            messages.last().unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(marks[0].starts_with("mark 0/0/"), "{marks:?}");
    assert!(marks[1].starts_with("mark 0/0/"), "{marks:?}");
    let ids: Vec<&str> = marks
        .iter()
        .map(|m| m.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(ids[0].len(), 16, "a root run id: {marks:?}");
    assert_ne!(ids[0], ids[1], "two runs, two conversations");
}
