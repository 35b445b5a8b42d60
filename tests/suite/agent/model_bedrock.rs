//! The Bedrock Converse provider against the fake model server over real HTTP: every request
//! carries a SigV4 signature the fake recomputes with the same secret (so a wrong canonical
//! request fails); streamed text and tool use in AWS event-stream frames; the whole answer from
//! `/converse`; exception frames, a refused key and bytes that are not frames as clear errors;
//! and an agent skill run end to end on `bedrock/...`.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use serde_json::{Value, json};
use skillgate::agent::config::AgentConfig;
use skillgate::agent::provider::bedrock::{Bedrock, Settings};
use skillgate::agent::provider::{
    Delta, Message, ModelRequest, Provider, ProviderError, StopReason, ToolDef,
};

use crate::support::model_fake::{ModelFake, Reply, Request, bedrock_text, bedrock_tool_use};

const ACCESS: &str = "AKIDTESTKEY";
const SECRET: &str = "test-secret-key";
const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";

fn env(fake: &ModelFake) -> impl Fn(&str) -> Option<String> {
    let endpoint = format!("http://{}", fake.addr);
    move |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some(ACCESS.into()),
        "AWS_SECRET_ACCESS_KEY" => Some(SECRET.into()),
        "AWS_REGION" => Some("eu-west-1".into()),
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME" => Some(endpoint.clone()),
        _ => None,
    }
}

fn client(fake: &ModelFake, stream: bool) -> Bedrock {
    let config = AgentConfig {
        stream,
        request_timeout: Duration::from_millis(500),
        ..AgentConfig::default()
    };
    Bedrock::new(Settings::from_env(&config, &env(fake)).unwrap())
}

fn request() -> ModelRequest {
    ModelRequest {
        model: MODEL.into(),
        messages: vec![Message::system("Be brief."), Message::user("Say hello.")],
        tools: vec![ToolDef {
            name: "invoke".into(),
            description: "Run code.".into(),
            schema: json!({ "type": "object", "properties": { "code": { "type": "string" } } }),
        }],
        max_tokens: Some(100),
        ..ModelRequest::default()
    }
}

/// Recomputes the signature of a request the fake got, as AWS would, and compares.
fn signature_is_valid(fake: &ModelFake, got: &Request) -> bool {
    let header = |name: &str| {
        got.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let authorization = header("authorization");
    let amz_date = header("x-amz-date");
    let Ok(time) = chrono_like(&amz_date) else {
        return false;
    };
    let identity = Credentials::new(ACCESS, SECRET, None, None, "test").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("eu-west-1")
        .name("bedrock")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let url = format!("http://{}{}", fake.addr, got.path);
    let raw = got.raw.clone();
    let headers = [("content-type", "application/json")];
    let signable = SignableRequest::new(
        "POST",
        &url,
        headers.iter().copied(),
        SignableBody::Bytes(&raw),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    instructions
        .headers()
        .any(|(name, value)| name == "authorization" && value == authorization)
}

/// `20261123T215126Z` as a time.
fn chrono_like(text: &str) -> Result<SystemTime, ()> {
    let digits =
        |r: std::ops::Range<usize>| text.get(r).and_then(|s| s.parse::<u64>().ok()).ok_or(());
    let (y, mo, d) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (h, mi, s) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(days * 86_400 + h * 3600 + mi * 60 + s))
}

#[tokio::test]
async fn a_streamed_answer_is_signed_with_sigv4_and_read_from_event_stream_frames() {
    let fake = ModelFake::start(vec![bedrock_text(&["Hel", "lo!"], 12, 3)]).await;
    let mut deltas = Vec::new();
    let out = client(&fake, true)
        .call(&request(), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(out.text, "Hello!");
    assert_eq!((out.usage.input_tokens, out.usage.output_tokens), (12, 3));
    assert_eq!(out.stop, StopReason::EndTurn);
    assert_eq!(
        deltas,
        [Delta::Text("Hel".into()), Delta::Text("lo!".into())]
    );

    let got = &fake.requests()[0];
    assert_eq!(
        got.path,
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
    );
    assert!(signature_is_valid(&fake, got), "{:?}", got.headers);
    let auth = got.headers["authorization"].to_str().unwrap();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDTESTKEY/"),
        "{auth}"
    );
    assert!(auth.contains("/eu-west-1/bedrock/aws4_request"), "{auth}");
    assert_eq!(got.body["system"], json!([{ "text": "Be brief." }]));
    assert_eq!(
        got.body["messages"][0],
        json!({ "role": "user", "content": [{ "text": "Say hello." }] })
    );
    assert_eq!(got.body["inferenceConfig"]["maxTokens"], 100);
    assert_eq!(
        got.body["toolConfig"]["tools"][0]["toolSpec"]["name"],
        "invoke"
    );
}

#[tokio::test]
async fn a_tool_use_streams_its_input_in_fragments() {
    let fake = ModelFake::start(vec![bedrock_tool_use(
        "tu1",
        "invoke",
        &["{\"code\":", "\"return 1\"}"],
    )])
    .await;
    let out = client(&fake, true)
        .call(&request(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(out.stop, StopReason::ToolUse);
    assert_eq!(out.tool_calls.len(), 1);
    assert_eq!(out.tool_calls[0].id, "tu1");
    assert_eq!(out.tool_calls[0].input, json!({ "code": "return 1" }));
}

#[tokio::test]
async fn the_whole_answer_comes_from_converse() {
    let fake = ModelFake::start(vec![Reply::Json(json!({
        "output": { "message": { "role": "assistant", "content": [
            { "text": "Let me run that." },
            { "toolUse": { "toolUseId": "tu9", "name": "invoke", "input": { "code": "return 2" } } }
        ] } },
        "stopReason": "tool_use",
        "usage": { "inputTokens": 5, "outputTokens": 7, "totalTokens": 12 }
    }))])
    .await;
    let out = client(&fake, false)
        .call(&request(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(out.text, "Let me run that.");
    assert_eq!(out.tool_calls[0].input, json!({ "code": "return 2" }));
    assert_eq!(out.usage.output_tokens, 7);
    let got = &fake.requests()[0];
    assert!(got.path.ends_with("/converse"), "{}", got.path);
    assert!(signature_is_valid(&fake, got));
}

#[tokio::test]
async fn exceptions_refusals_and_garbage_are_clear_errors() {
    let throttled = Reply::Aws(vec![
        ("messageStart".into(), json!({ "role": "assistant" })),
        (
            "!throttlingException".into(),
            json!({ "message": "Too many requests" }),
        ),
    ]);
    let too_long = Reply::Aws(vec![(
        "!validationException".into(),
        json!({ "message": "Input is too long for requested model." }),
    )]);
    let refused = Reply::Status(
        403,
        vec![("x-amzn-errortype", "UnrecognizedClientException".into())],
        r#"{"message":"The security token included in the request is invalid."}"#.into(),
    );
    let garbage = Reply::Raw("this is not an event stream at all".into());
    let fake = ModelFake::start(vec![throttled, too_long, refused, garbage]).await;
    let bedrock = client(&fake, true);
    let mut errors = Vec::new();
    for _ in 0..4 {
        errors.push(bedrock.call(&request(), &mut |_| {}).await.unwrap_err());
    }
    assert!(
        matches!(errors[0], ProviderError::RateLimited { .. }),
        "{:?}",
        errors[0]
    );
    assert!(
        matches!(errors[1], ProviderError::ContextLength { .. }),
        "{:?}",
        errors[1]
    );
    assert!(
        matches!(errors[2], ProviderError::Unauthorized { .. }),
        "{:?}",
        errors[2]
    );
    assert!(
        errors[2].to_string().contains("security token"),
        "{}",
        errors[2]
    );
    assert!(
        matches!(errors[3], ProviderError::Malformed { .. }),
        "{:?}",
        errors[3]
    );
}

#[test]
fn missing_credentials_or_region_are_named() {
    let none = |_: &str| None;
    let err = Settings::from_env(&AgentConfig::default(), &none).unwrap_err();
    assert!(err.message().contains("AWS_REGION"), "{err}");
    let region_only = |name: &str| (name == "AWS_REGION").then(|| "us-east-1".to_string());
    let err = Settings::from_env(&AgentConfig::default(), &region_only).unwrap_err();
    assert!(err.message().contains("AWS_ACCESS_KEY_ID"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_skill_runs_on_bedrock_end_to_end_from_the_aws_variables() {
    let fake = ModelFake::start(vec![
        bedrock_tool_use("tu1", "invoke", &["{\"code\":\"return 40 + 2;\"}"]),
        bedrock_text(&["The answer is 42."], 30, 6),
    ])
    .await;
    let project = crate::support::common::Project::new();
    project.skill(
        "answer.skill.md",
        &format!("---\nname: answer\ndescription: Answers.\nmetadata:\n  model: bedrock/{MODEL}\n---\nAnswer.\n"),
    );
    let mut command = crate::support::common::skillgate_command(project.path());
    command
        .args(["run", "answer"])
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "eu-west-1")
        .env(
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
            format!("http://{}", fake.addr),
        );
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stdout = crate::support::common::stdout(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        crate::support::common::stderr(&out)
    );
    assert_eq!(stdout.trim(), "The answer is 42.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| signature_is_valid(&fake, r)));
    let result: Value =
        requests[1].body["messages"][2]["content"][0]["toolResult"]["content"][0]["text"]
            .as_str()
            .map(|t| serde_json::from_str(t).unwrap())
            .unwrap();
    assert_eq!(result, json!({ "result": 42 }));
}
