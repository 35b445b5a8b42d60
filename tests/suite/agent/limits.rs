//! Every limit, each with its clear error; structured returns with the reminder loop; model
//! errors; persistent mode's retries.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::support::model_fake::{ModelFake, Reply};

async fn run_agent(fake: &ModelFake, model: Value, extra: Value) -> Result<Option<Value>> {
    let project = Project::new();
    let kernel = kernel(&project, &Probe::default());
    let mut config = json!({ "model": "openai/fake-1", "base-url": fake.base(), "retries": 0 });
    config
        .as_object_mut()
        .unwrap()
        .extend(model.as_object().unwrap().clone());
    let mut args = json!({ "prompt": "p", "config": config });
    args.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let out = kernel
        .invoke("agent", args, InvokeOptions::default())
        .await?;
    Ok(out.map(|v| (*v).clone()))
}

fn limit_of(err: &skillgate::SkillError) -> Option<String> {
    err.data()
        .and_then(|d| d.get("limit"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[tokio::test]
async fn max_turns_stops_a_model_that_never_answers() {
    let fake = ModelFake::start(vec![
        code_turn("c1", "return 1;"),
        code_turn("c2", "return 2;"),
        code_turn("c3", "return 3;"),
    ])
    .await;
    let err = run_agent(&fake, json!({ "maxTurns": 2 }), json!({}))
        .await
        .unwrap_err();
    assert_eq!(limit_of(&err).as_deref(), Some("maxTurns"), "{err}");
    assert!(err.message().contains("maxTurns limit (2)"), "{err}");
    assert_eq!(fake.requests().len(), 2, "no third model call");
}

#[tokio::test]
async fn by_default_an_agent_makes_at_most_30_model_calls() {
    let turns = (0..31)
        .map(|n| code_turn(&format!("c{n}"), "return 1;"))
        .collect();
    let fake = ModelFake::start(turns).await;
    // Steps are not what stops it: 30 code runs are allowed too.
    let err = run_agent(&fake, json!({}), json!({})).await.unwrap_err();
    assert_eq!(limit_of(&err).as_deref(), Some("maxTurns"), "{err}");
    assert!(err.message().contains("maxTurns limit (30)"), "{err}");
    assert_eq!(fake.requests().len(), 30);
}

#[tokio::test]
async fn by_default_an_agent_runs_code_at_most_30_times() {
    let mut turns: Vec<Reply> = (0..31)
        .map(|n| code_turn(&format!("c{n}"), "return 1;"))
        .collect();
    turns.push(text_turn("unreachable"));
    let fake = ModelFake::start(turns).await;
    let err = run_agent(&fake, json!({ "maxTurns": 40 }), json!({}))
        .await
        .unwrap_err();
    assert_eq!(limit_of(&err).as_deref(), Some("maxSteps"), "{err}");
    assert!(err.message().contains("(30)"), "{err}");
    // The 31st code run was refused and the run ended at that call's end.
    assert_eq!(fake.requests().len(), 31);
}

#[tokio::test]
async fn max_steps_refuses_more_code_then_ends_the_run_at_the_turn_end() {
    let fake = ModelFake::start(vec![
        code_turn("c1", "return 1;"),
        code_turn("c2", "return 2;"),
        text_turn("unreachable"),
    ])
    .await;
    let err = run_agent(&fake, json!({ "maxSteps": 1 }), json!({}))
        .await
        .unwrap_err();
    assert_eq!(limit_of(&err).as_deref(), Some("maxSteps"), "{err}");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn the_token_budget_ends_the_run_once_spent() {
    // Each turn reports 10 tokens in and 5 out.
    let fake = ModelFake::start(vec![code_turn("c1", "return 1;"), text_turn("done")]).await;
    let fake_usage = ModelFake::start(vec![Reply::Stream(
        crate::support::model_fake::openai_text(&["a"], 30, 20),
    )])
    .await;
    let err = run_agent(&fake_usage, json!({ "tokenBudget": 40 }), json!({}))
        .await
        .unwrap_err();
    assert_eq!(limit_of(&err).as_deref(), Some("tokenBudget"), "{err}");
    assert!(err.message().contains("50 tokens"), "{err}");
    // Under budget the same kind of run finishes.
    let out = run_agent(&fake, json!({ "tokenBudget": 1000 }), json!({}))
        .await
        .unwrap();
    assert_eq!(out, Some(json!("done")));
}

#[tokio::test]
async fn the_wall_clock_limit_ends_a_run_waiting_on_a_slow_model() {
    let fake = ModelFake::start(vec![Reply::Stall(Duration::from_secs(30))]).await;
    let started = std::time::Instant::now();
    let err = run_agent(&fake, json!({ "timeout": "300ms" }), json!({}))
        .await
        .unwrap_err();
    assert_eq!(limit_of(&err).as_deref(), Some("timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn a_wrong_structured_result_is_refused_then_a_reminder_gets_it_fixed() {
    let fake = ModelFake::start(vec![
        code_turn("c1", "ctx.manager.finish({ count: 'three' });"),
        text_turn("I am done."),
        code_turn("c2", "ctx.manager.finish({ count: 3 });"),
    ])
    .await;
    let out = run_agent(
        &fake,
        json!({}),
        json!({ "returns": { "type": "object", "properties": { "count": { "type": "number" } }, "required": ["count"] } }),
    )
    .await
    .unwrap();
    assert_eq!(out, Some(json!({ "count": 3 })));
    let refused = tool_result(&fake, 1, "c1");
    assert_eq!(refused["error"]["code"], "invalid-returns", "{refused}");
    let requests = fake.requests();
    let reminder = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(reminder["role"], "user");
    assert!(
        reminder["content"]
            .as_str()
            .unwrap()
            .contains("\"required\":[\"count\"]"),
        "the reminder carries the schema: {reminder}"
    );
}

#[tokio::test]
async fn a_model_that_never_gives_the_structured_result_fails_after_the_reminders() {
    let fake = ModelFake::start(vec![
        text_turn("a"),
        text_turn("b"),
        text_turn("c"),
        text_turn("d"),
    ])
    .await;
    let err = run_agent(&fake, json!({}), json!({ "returns": { "type": "number" } }))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), skillgate::ErrorKind::InvalidReturns, "{err}");
    assert!(err.message().contains("3 reminders"), "{err}");
    assert_eq!(fake.requests().len(), 4);
}

/// The one deviation from spec 05 here (see the README's "Spec deviations"): a persistent agent
/// goes on after every answer, but code that calls `ctx.manager.finish` ends it.
#[tokio::test]
async fn a_persistent_agent_goes_on_after_an_answer_and_ends_only_when_its_code_finishes() {
    let fake = ModelFake::start(vec![
        text_turn("still thinking"),
        text_turn("still thinking, more"),
        code_turn("c1", "ctx.manager.finish({ done: true });"),
    ])
    .await;
    let out = run_agent(&fake, json!({ "persistent": true }), json!({}))
        .await
        .unwrap();
    assert_eq!(out, Some(json!({ "done": true })));
    assert_eq!(fake.requests().len(), 3, "two answers did not end it");
}

#[tokio::test]
async fn persistent_mode_cannot_promise_a_structured_result() {
    let fake = ModelFake::start(vec![]).await;
    let err = run_agent(
        &fake,
        json!({ "persistent": true }),
        json!({ "returns": { "type": "number" } }),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), skillgate::ErrorKind::Config);
    assert!(err.message().contains("persistent"), "{err}");
}

#[tokio::test]
async fn persistent_mode_retries_a_failed_model_call_after_a_backoff() {
    let fake = ModelFake::start(vec![
        Reply::Status(500, vec![], "down".into()),
        code_turn("c1", "ctx.manager.finish('back');"),
    ])
    .await;
    let out = run_agent(&fake, json!({ "persistent": true }), json!({}))
        .await
        .unwrap();
    assert_eq!(out, Some(json!("back")));
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn provider_errors_end_the_run_with_their_meaning_and_retries_are_counted() {
    let cases = [
        (
            Reply::Status(401, vec![], r#"{"error":{"message":"bad key"}}"#.into()),
            json!({}),
            "401",
        ),
        (
            Reply::Raw("data: {not json\n\n".into()),
            json!({}),
            "could not be read",
        ),
        (
            Reply::Stall(Duration::from_secs(30)),
            json!({ "request-timeout": "200ms" }),
            "no answer within",
        ),
    ];
    for (reply, model, needle) in cases {
        let fake = ModelFake::start(vec![reply]).await;
        let err = run_agent(&fake, model, json!({})).await.unwrap_err();
        assert!(err.message().contains(needle), "{needle}: {err}");
        assert_eq!(
            err.data().and_then(|d| d.get("rule")).cloned(),
            Some(json!("model-error"))
        );
    }
    // 429 then 500 then an answer: two retries, reported to the hook (and so in the trace).
    let fake = ModelFake::start(vec![
        Reply::Status(429, vec![("retry-after", "0".into())], "slow down".into()),
        Reply::Status(500, vec![], "oops".into()),
        text_turn("fine"),
    ])
    .await;
    let project = Project::new();
    project.skill(
        "patient.skill.md",
        &agent_skill("patient", &fake, "", "").replace("retries: 0", "retries: 2"),
    );
    let probe = Probe::default();
    let kernel = kernel(&project, &probe);
    let out = run(&kernel, "patient", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("fine")));
    let retries: Vec<Value> = probe
        .trace()
        .into_iter()
        .filter(|e| e["type"] == "retry")
        .collect();
    assert_eq!(retries.len(), 2, "{:?}", probe.trace());
    assert!(retries[0]["error"].as_str().unwrap().contains("429"));
}

#[tokio::test]
async fn a_model_vendor_down_is_upstream_unavailable_and_a_refused_key_is_not() {
    for (reply, upstream, status) in [
        (Reply::Status(503, vec![], "overloaded".into()), true, 502),
        (
            Reply::Status(401, vec![], r#"{"error":{"message":"bad key"}}"#.into()),
            false,
            500,
        ),
    ] {
        let fake = ModelFake::start(vec![reply.clone(), reply]).await;
        let err = run_agent(&fake, json!({}), json!({})).await.unwrap_err();
        assert_eq!(err.is_upstream(), upstream, "{err}");

        let project = Project::new();
        project.skill("chat.skill.md", &agent_skill("chat", &fake, "", ""));
        let mut server =
            crate::support::server::TestServer::start(project, crate::support::server::config())
                .await;
        let response = server.post_json("/invoke/chat", &json!({})).await;
        assert_eq!(response.status(), status, "{err}");
        let body: Value = response.json().await.unwrap();
        assert!(
            !body["detail"].as_str().unwrap().contains("127.0.0.1"),
            "the vendor's address stays in the log: {body}"
        );
        server.finish().await;
    }
}
