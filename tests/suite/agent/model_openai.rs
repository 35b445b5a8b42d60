//! The OpenAI-compatible provider against the fake model server over real HTTP: streamed text
//! arrives as deltas and then whole with its usage; a tool call streamed in fragments is put
//! together; the request carries the key, the tools and the conversation in the wire form; a
//! whole (not streamed) answer reads the same; 401, context length, a garbage stream and a
//! stream cut short are clear errors; 429 and 5xx are retried after `Retry-After`, counted; a
//! stalled server times out.

use std::time::Duration;

use serde_json::json;
use skillgate::agent::provider::openai::OpenAi;
use skillgate::agent::provider::retry::{self, RetryPolicy};
use skillgate::agent::provider::{
    Delta, Message, ModelRequest, ModelResponse, ProviderError, StopReason, ToolCall, ToolDef,
};

use crate::support::model_fake::{ModelFake, Reply, openai_text, openai_tool_call};

fn request() -> ModelRequest {
    ModelRequest {
        model: "fake-1".into(),
        messages: vec![Message::system("Be brief."), Message::user("Say hello.")],
        ..ModelRequest::default()
    }
}

fn client(fake: &ModelFake) -> OpenAi {
    OpenAi::new(
        &fake.base(),
        Some("sk-test".into()),
        Duration::from_millis(500),
    )
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        retries: 3,
        base: Duration::from_millis(5),
        cap: Duration::from_secs(1),
    }
}

/// One call with retries: the answer (or error), the deltas and the retries seen.
async fn call(
    provider: &OpenAi,
    request: &ModelRequest,
    policy: RetryPolicy,
) -> (
    Result<ModelResponse, ProviderError>,
    Vec<Delta>,
    Vec<Duration>,
) {
    let mut deltas = Vec::new();
    let mut waits = Vec::new();
    let out = retry::call(
        provider,
        request,
        policy,
        &mut |d| deltas.push(d),
        &mut |_, _, wait| waits.push(wait),
    )
    .await;
    (out, deltas, waits)
}

#[tokio::test]
async fn streamed_text_arrives_as_deltas_then_whole_with_its_usage() {
    let fake = ModelFake::start(vec![Reply::Stream(openai_text(&["Hel", "lo!"], 12, 3))]).await;
    let (out, deltas, _) = call(&client(&fake), &request(), quick()).await;
    let answer = out.unwrap();
    assert_eq!(
        deltas,
        [Delta::Text("Hel".into()), Delta::Text("lo!".into())]
    );
    assert_eq!(answer.text, "Hello!");
    assert_eq!(answer.stop, StopReason::EndTurn);
    assert_eq!(
        (answer.usage.input_tokens, answer.usage.output_tokens),
        (12, 3)
    );
    assert_eq!(answer.model, "fake-1");
    let sent = &fake.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], "Bearer sk-test");
    assert_eq!(sent.body["model"], "fake-1");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(
        sent.body["messages"],
        json!([
            { "role": "system", "content": "Be brief." },
            { "role": "user", "content": "Say hello." }
        ])
    );
}

#[tokio::test]
async fn a_tool_call_streamed_in_fragments_is_put_together_and_sent_back_in_the_wire_form() {
    let fake = ModelFake::start(vec![
        Reply::Stream(openai_tool_call(
            "call_7",
            "invoke",
            &["{\"co", "de\": \"return 1", "+1\"}"],
        )),
        Reply::Stream(openai_text(&["2"], 30, 1)),
    ])
    .await;
    let provider = client(&fake);
    let mut first = request();
    first.tools = vec![ToolDef {
        name: "invoke".into(),
        description: "Runs JavaScript.".into(),
        schema: json!({ "type": "object", "properties": { "code": { "type": "string" } } }),
    }];
    let answer = call(&provider, &first, quick()).await.0.unwrap();
    assert_eq!(answer.stop, StopReason::ToolUse);
    assert_eq!(
        answer.tool_calls,
        [ToolCall {
            id: "call_7".into(),
            name: "invoke".into(),
            input: json!({ "code": "return 1+1" }),
        }]
    );
    let sent = &fake.requests()[0].body;
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "invoke");
    assert_eq!(
        sent["tools"][0]["function"]["parameters"]["properties"]["code"]["type"],
        "string"
    );

    // The next turn carries the call and its result back.
    let mut second = first.clone();
    second
        .messages
        .push(Message::assistant("", answer.tool_calls.clone()));
    second.messages.push(Message::tool_result("call_7", "2"));
    let answer = call(&provider, &second, quick()).await.0.unwrap();
    assert_eq!(answer.text, "2");
    let sent = &fake.requests()[1].body["messages"];
    assert_eq!(
        sent[2],
        json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{ "id": "call_7", "type": "function",
                "function": { "name": "invoke", "arguments": "{\"code\":\"return 1+1\"}" } }]
        })
    );
    assert_eq!(
        sent[3],
        json!({ "role": "tool", "tool_call_id": "call_7", "content": "2" })
    );
}

#[tokio::test]
async fn a_whole_answer_without_streaming_reads_the_same() {
    let fake = ModelFake::start(vec![Reply::Json(json!({
        "model": "fake-1",
        "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Working.",
            "tool_calls": [{ "id": "c1", "type": "function",
                "function": { "name": "invoke", "arguments": "{\"code\":\"x\"}" } }]
        } }],
        "usage": { "prompt_tokens": 5, "completion_tokens": 7 }
    }))])
    .await;
    let provider = client(&fake).whole();
    let (out, deltas, _) = call(&provider, &request(), quick()).await;
    let answer = out.unwrap();
    assert_eq!(answer.text, "Working.");
    assert_eq!(deltas, [Delta::Text("Working.".into())]);
    assert_eq!(answer.tool_calls[0].input, json!({ "code": "x" }));
    assert_eq!(answer.stop, StopReason::ToolUse);
    assert_eq!(answer.usage.output_tokens, 7);
    assert_eq!(fake.requests()[0].body["stream"], false);
}

#[tokio::test]
async fn a_refused_key_is_a_clear_error_and_is_not_retried() {
    let body =
        json!({ "error": { "message": "Incorrect API key provided", "code": "invalid_api_key" } });
    let fake = ModelFake::start(vec![Reply::Status(401, vec![], body.to_string())]).await;
    let (out, _, waits) = call(&client(&fake), &request(), quick()).await;
    let err = out.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "openai: the API key was refused (401): Incorrect API key provided"
    );
    assert!(waits.is_empty());
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried_after_retry_after_and_counted() {
    let fake = ModelFake::start(vec![
        Reply::Status(
            429,
            vec![("retry-after-ms", "40".into())],
            json!({ "error": { "message": "slow down" } }).to_string(),
        ),
        Reply::Status(503, vec![("retry-after", "0.02".into())], "busy".into()),
        Reply::Status(500, vec![], "oops".into()),
        Reply::Stream(openai_text(&["ok"], 1, 1)),
    ])
    .await;
    let (out, _, waits) = call(&client(&fake), &request(), quick()).await;
    let answer = out.unwrap();
    assert_eq!(answer.text, "ok");
    assert_eq!(answer.retries, 3);
    // The server's waits, then the policy's backoff (5 ms doubled twice) where it gave none.
    assert_eq!(
        waits,
        [
            Duration::from_millis(40),
            Duration::from_millis(20),
            Duration::from_millis(20)
        ]
    );
    assert_eq!(fake.requests().len(), 4);
}

#[tokio::test]
async fn retries_end_with_the_last_error_once_the_policy_is_spent() {
    let fake = ModelFake::start(vec![
        Reply::Status(500, vec![], "down".into()),
        Reply::Status(500, vec![], "still down".into()),
    ])
    .await;
    let policy = RetryPolicy {
        retries: 1,
        ..quick()
    };
    let (out, _, waits) = call(&client(&fake), &request(), policy).await;
    let err = out.unwrap_err();
    assert_eq!(
        err.to_string(),
        "openai: the server failed (500): still down"
    );
    assert_eq!(waits.len(), 1);
}

#[tokio::test]
async fn a_conversation_over_the_context_window_is_named_as_such() {
    let body = json!({ "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        "code": "context_length_exceeded" } });
    let fake = ModelFake::start(vec![Reply::Status(400, vec![], body.to_string())]).await;
    let err = call(&client(&fake), &request(), quick())
        .await
        .0
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ContextLength { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("openai: the conversation is longer than the model's context window"),
        "{err}"
    );
}

#[tokio::test]
async fn a_garbage_stream_and_a_stream_cut_short_are_clear_errors() {
    let fake = ModelFake::start(vec![
        Reply::Raw(
            "data: {\"choices\": [{\"delta\": {\"content\": \"a\"}}]}\n\ndata: <html>oops\n\n"
                .into(),
        ),
        Reply::Raw("data: {\"choices\": [{\"delta\": {\"content\": \"half\"}}]}\n\n".into()),
        Reply::Stream(openai_tool_call("c", "invoke", &["{\"code\": "])),
    ])
    .await;
    let provider = client(&fake);
    let (out, deltas, waits) = call(&provider, &request(), quick()).await;
    let err = out.unwrap_err();
    assert!(matches!(err, ProviderError::Malformed { .. }), "{err:?}");
    assert!(
        err.to_string().contains("a streamed chunk is not JSON"),
        "{err}"
    );
    assert!(err.to_string().contains("<html>oops"), "{err}");
    assert_eq!(deltas, [Delta::Text("a".into())]);
    assert!(waits.is_empty(), "a malformed answer is not retried");

    let err = call(&provider, &request(), quick()).await.0.unwrap_err();
    assert_eq!(
        err.to_string(),
        "openai: the answer could not be read: the stream ended before the answer did"
    );

    let err = call(&provider, &request(), quick()).await.0.unwrap_err();
    assert!(
        err.to_string()
            .contains("the arguments of tool call `invoke` are not JSON"),
        "{err}"
    );
}

#[tokio::test]
async fn a_stalled_server_times_out_and_is_tried_again() {
    let fake = ModelFake::start(vec![
        Reply::Stall(Duration::from_secs(3)),
        Reply::Stream(openai_text(&["late"], 1, 1)),
    ])
    .await;
    let (out, _, waits) = call(&client(&fake), &request(), quick()).await;
    assert_eq!(out.unwrap().text, "late");
    assert_eq!(waits.len(), 1);

    let fake = ModelFake::start(vec![Reply::Stall(Duration::from_secs(3))]).await;
    let policy = RetryPolicy {
        retries: 0,
        ..quick()
    };
    let err = call(&client(&fake), &request(), policy)
        .await
        .0
        .unwrap_err();
    assert_eq!(err.to_string(), "openai: no answer within 500ms");
}

#[tokio::test]
async fn the_base_url_and_key_come_from_the_vendors_variables_and_the_key_is_never_printed() {
    let fake = ModelFake::start(vec![Reply::Stream(openai_text(&["hi"], 1, 1))]).await;
    let base = format!("{}/", fake.base());
    let env = |name: &str| match name {
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_API_KEY" => Some("sk-from-env".to_string()),
        _ => None,
    };
    let provider = OpenAi::from_env(&env, Duration::from_secs(1));
    assert_eq!(provider.base(), fake.base());
    assert_eq!(
        call(&provider, &request(), quick()).await.0.unwrap().text,
        "hi"
    );
    assert_eq!(
        fake.requests()[0].headers["authorization"],
        "Bearer sk-from-env"
    );
    let printed = format!("{provider:?}");
    assert!(!printed.contains("sk-from-env"), "{printed}");

    let unset = OpenAi::from_env(&|_| None, Duration::from_secs(1));
    assert_eq!(unset.base(), "https://api.openai.com/v1");
}
