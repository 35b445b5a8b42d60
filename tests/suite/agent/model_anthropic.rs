//! The Anthropic Messages provider against the fake model server over real HTTP: streamed text
//! with its usage, the request's headers and shape (system apart, `max_tokens` always given); a
//! tool call whose input streams in JSON fragments; tool results sent back as one user turn; a
//! refused key, an overloaded server (status and error event) retried, a prompt too long named.

use std::time::Duration;

use serde_json::json;
use skillgate::agent::provider::anthropic::Anthropic;
use skillgate::agent::provider::retry::{self, RetryPolicy};
use skillgate::agent::provider::{
    Delta, Message, ModelRequest, ModelResponse, ProviderError, StopReason, ToolCall, ToolDef,
};

use crate::support::model_fake::{ModelFake, Reply, anthropic, anthropic_text, anthropic_tool_use};

fn request() -> ModelRequest {
    ModelRequest {
        model: "claude-fake".into(),
        messages: vec![Message::system("Be brief."), Message::user("Say hello.")],
        ..ModelRequest::default()
    }
}

fn client(fake: &ModelFake) -> Anthropic {
    Anthropic::new(
        &format!("http://{}", fake.addr),
        Some("sk-ant-test".into()),
        Duration::from_millis(500),
    )
}

async fn call(
    provider: &Anthropic,
    request: &ModelRequest,
) -> (Result<ModelResponse, ProviderError>, Vec<Delta>, u32) {
    let policy = RetryPolicy {
        retries: 2,
        base: Duration::from_millis(5),
        cap: Duration::from_secs(1),
    };
    let mut deltas = Vec::new();
    let mut retried = 0;
    let out = retry::call(
        provider,
        request,
        policy,
        &mut |d| deltas.push(d),
        &mut |_, _, _| retried += 1,
    )
    .await;
    (out, deltas, retried)
}

#[tokio::test]
async fn streamed_text_arrives_with_its_usage_and_the_request_has_the_messages_shape() {
    let fake = ModelFake::start(vec![anthropic_text(&["Hi", " there"], 9, 4)]).await;
    let (out, deltas, _) = call(&client(&fake), &request()).await;
    let answer = out.unwrap();
    assert_eq!(answer.text, "Hi there");
    assert_eq!(
        deltas,
        [Delta::Text("Hi".into()), Delta::Text(" there".into())]
    );
    assert_eq!(
        (answer.usage.input_tokens, answer.usage.output_tokens),
        (9, 4)
    );
    assert_eq!(answer.stop, StopReason::EndTurn);
    assert_eq!(answer.model, "claude-fake");
    let sent = &fake.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent.body["system"], "Be brief.");
    assert_eq!(sent.body["max_tokens"], 4096);
    assert_eq!(
        sent.body["messages"],
        json!([{ "role": "user", "content": [{ "type": "text", "text": "Say hello." }] }])
    );
}

#[tokio::test]
async fn a_tool_call_streamed_in_fragments_is_put_together_and_results_go_back_as_one_user_turn() {
    let fake = ModelFake::start(vec![
        anthropic_tool_use(
            "Let me run it.",
            "toolu_1",
            "invoke",
            &["{\"code\":", " \"return 2\"}"],
        ),
        anthropic_text(&["2"], 40, 1),
    ])
    .await;
    let provider = client(&fake);
    let mut first = request();
    first.tools = vec![ToolDef {
        name: "invoke".into(),
        description: "Runs JavaScript.".into(),
        schema: json!({ "type": "object" }),
    }];
    let answer = call(&provider, &first).await.0.unwrap();
    assert_eq!(answer.text, "Let me run it.");
    assert_eq!(answer.stop, StopReason::ToolUse);
    assert_eq!(
        answer.tool_calls,
        [ToolCall {
            id: "toolu_1".into(),
            name: "invoke".into(),
            input: json!({ "code": "return 2" }),
        }]
    );
    assert_eq!(
        fake.requests()[0].body["tools"],
        json!([{ "name": "invoke", "description": "Runs JavaScript.", "input_schema": { "type": "object" } }])
    );

    let mut second = first.clone();
    let mut calls = answer.tool_calls.clone();
    calls.push(ToolCall {
        id: "toolu_2".into(),
        name: "invoke".into(),
        input: json!({}),
    });
    second
        .messages
        .push(Message::assistant(answer.text.clone(), calls));
    second.messages.push(Message::tool_result("toolu_1", "2"));
    second.messages.push(Message::tool_result("toolu_2", "ok"));
    assert_eq!(call(&provider, &second).await.0.unwrap().text, "2");
    let sent = &fake.requests()[1].body["messages"];
    assert_eq!(sent.as_array().unwrap().len(), 3, "{sent}");
    assert_eq!(sent[1]["role"], "assistant");
    assert_eq!(sent[1]["content"][1]["type"], "tool_use");
    assert_eq!(
        sent[1]["content"][1]["input"],
        json!({ "code": "return 2" })
    );
    assert_eq!(
        sent[2],
        json!({ "role": "user", "content": [
            { "type": "tool_result", "tool_use_id": "toolu_1", "content": "2" },
            { "type": "tool_result", "tool_use_id": "toolu_2", "content": "ok" }
        ] })
    );
}

#[tokio::test]
async fn a_refused_key_is_clear_and_an_overloaded_server_is_retried() {
    let refused = json!({ "type": "error", "error": { "type": "authentication_error", "message": "invalid x-api-key" } });
    let fake = ModelFake::start(vec![Reply::Status(401, vec![], refused.to_string())]).await;
    let err = call(&client(&fake), &request()).await.0.unwrap_err();
    assert_eq!(
        err.to_string(),
        "anthropic: the API key was refused (401): invalid x-api-key"
    );

    let overloaded = json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } });
    let fake = ModelFake::start(vec![
        Reply::Status(529, vec![], overloaded.to_string()),
        anthropic(&[("error", overloaded.clone())]),
        anthropic_text(&["fine"], 1, 1),
    ])
    .await;
    let (out, _, retried) = call(&client(&fake), &request()).await;
    let answer = out.unwrap();
    assert_eq!(answer.text, "fine");
    assert_eq!((retried, answer.retries), (2, 2));
}

#[tokio::test]
async fn a_prompt_too_long_is_named_and_a_stream_without_its_stop_is_an_error() {
    let long = json!({ "type": "error", "error": { "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum" } });
    let fake = ModelFake::start(vec![
        Reply::Status(400, vec![], long.to_string()),
        anthropic(&[(
            "message_start",
            json!({ "type": "message_start", "message": { "model": "m", "usage": {} } }),
        )]),
    ])
    .await;
    let provider = client(&fake);
    let err = call(&provider, &request()).await.0.unwrap_err();
    assert!(
        matches!(err, ProviderError::ContextLength { .. }),
        "{err:?}"
    );
    let err = call(&provider, &request()).await.0.unwrap_err();
    assert_eq!(
        err.to_string(),
        "anthropic: the answer could not be read: the stream ended before the answer did"
    );
}

#[tokio::test]
async fn the_base_url_and_key_come_from_the_vendors_variables() {
    let fake = ModelFake::start(vec![anthropic_text(&["ok"], 1, 1)]).await;
    let base = format!("http://{}", fake.addr);
    let env = |name: &str| match name {
        "ANTHROPIC_BASE_URL" => Some(base.clone()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-env".to_string()),
        _ => None,
    };
    let provider = Anthropic::from_env(&env, Duration::from_secs(1));
    assert_eq!(call(&provider, &request()).await.0.unwrap().text, "ok");
    assert_eq!(fake.requests()[0].headers["x-api-key"], "sk-ant-env");
    assert!(!format!("{provider:?}").contains("sk-ant-env"));
    let unset = Anthropic::from_env(&|_| None, Duration::from_secs(1));
    assert_eq!(unset.base(), "https://api.anthropic.com");
}
