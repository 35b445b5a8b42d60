//! Answering in the thread: each `gateway-send` message as a reply, a streamed run as one
//! placeholder message updated at a bounded rate, and the result (or the error, with nothing
//! internal in it) as the last reply, in mrkdwn, split under Slack's limit. The last reply
//! carries message metadata (`skillgate_result`: skill, request id, status, and the result when
//! it is small) for apps that read the thread.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::gateway::problem::Problem;
use crate::gateway::reply::as_markdown;
use crate::gateway::slack::api::{ApiError, WebApi};
use crate::gateway::slack::mrkdwn::{PART_LIMIT, split, to_mrkdwn};
use crate::gateway::{Dispatch, GatewayError, ReplyPart};

/// The metadata event type of a run's last reply.
pub const RESULT_EVENT: &str = "skillgate_result";
/// Largest result (as JSON) carried in the metadata.
const METADATA_RESULT_LIMIT: usize = 4_000;

/// Where the answer goes.
#[derive(Debug, Clone)]
pub struct Thread {
    pub channel: String,
    /// The thread's root: the message's own `ts` when it was not in a thread.
    pub ts: String,
}

/// How a run was answered.
#[derive(Debug)]
pub struct Answered {
    /// The run failed (its error was posted).
    pub failed: bool,
}

/// Reads `dispatch` to its end and posts what it says in `thread`.
pub async fn answer(
    api: &WebApi,
    thread: &Thread,
    mut dispatch: Dispatch,
    skill: &str,
    request_id: &str,
    update_interval: Duration,
) -> Result<Answered, ApiError> {
    let mut streamed: Option<Streamed> = None;
    while let Some(part) = dispatch.parts.recv().await {
        match part {
            ReplyPart::Message(message) => {
                post_text(api, thread, &as_markdown(&message), None).await?;
            }
            ReplyPart::Partial(piece) => match &mut streamed {
                None => {
                    // The placeholder: what there is so far, marked as still being written.
                    let text = to_mrkdwn(&format!("{} …", piece.trim_end()));
                    let ts = api
                        .post_message(&thread.channel, Some(&thread.ts), &text, None)
                        .await?;
                    streamed = Some(Streamed {
                        ts,
                        text: piece,
                        updated: Instant::now(),
                    });
                }
                Some(open) => {
                    open.text.push_str(&piece);
                    // At most one update per interval; the last state is written at the end.
                    if open.updated.elapsed() >= update_interval
                        && open.text.chars().count() < PART_LIMIT
                    {
                        let text = to_mrkdwn(&format!("{} …", open.text.trim_end()));
                        api.update(&thread.channel, &open.ts, &text, None).await?;
                        open.updated = Instant::now();
                    }
                }
            },
            // `web-send` is for HTTP; logs and bus events are not posted.
            ReplyPart::Head { .. }
            | ReplyPart::Chunk(_)
            | ReplyPart::Log(_)
            | ReplyPart::Gap(_)
            | ReplyPart::Event(_) => {}
            ReplyPart::Done(Ok(result)) => {
                let value = result.map_or(Value::Null, std::sync::Arc::unwrap_or_clone);
                let metadata = metadata(skill, request_id, "ok", Some(&value));
                match streamed.take() {
                    Some(open) => {
                        // The streamed text is the answer; a result that is not that text
                        // follows it.
                        let rest = match &value {
                            Value::Null => None,
                            Value::String(s) if *s == open.text => None,
                            other => Some(as_markdown(other)),
                        };
                        finish_stream(api, thread, &open, rest.is_none().then_some(&metadata))
                            .await?;
                        if let Some(rest) = rest {
                            post_text(api, thread, &rest, Some(metadata)).await?;
                        }
                    }
                    None => post_text(api, thread, &as_markdown(&value), Some(metadata)).await?,
                }
                return Ok(Answered { failed: false });
            }
            ReplyPart::Done(Err(err)) => {
                if let Some(open) = streamed.take() {
                    finish_stream(api, thread, &open, None).await?;
                }
                let failure = GatewayError::from_run(&err, skill, request_id);
                refuse(api, thread, skill, request_id, &failure).await?;
                return Ok(Answered { failed: true });
            }
        }
    }
    Ok(Answered { failed: true })
}

/// Posts why a message got no answer: a refusal before the run (no such skill, not
/// allowed) or the run's failure.
pub async fn refuse(
    api: &WebApi,
    thread: &Thread,
    skill: &str,
    request_id: &str,
    refusal: &GatewayError,
) -> Result<(), ApiError> {
    post_text(
        api,
        thread,
        &failure_text(skill, refusal, request_id),
        Some(metadata(skill, request_id, refusal.slug(), None)),
    )
    .await
}

struct Streamed {
    ts: String,
    text: String,
    updated: Instant,
}

/// The placeholder gets the whole streamed text; what does not fit follows as replies.
async fn finish_stream(
    api: &WebApi,
    thread: &Thread,
    open: &Streamed,
    metadata: Option<&Value>,
) -> Result<(), ApiError> {
    let parts = split(&to_mrkdwn(&open.text), PART_LIMIT);
    let last = parts.len().saturating_sub(1);
    for (i, part) in parts.iter().enumerate() {
        let meta = (i == last).then(|| metadata.cloned()).flatten();
        if i == 0 {
            api.update(&thread.channel, &open.ts, part, meta).await?;
        } else {
            api.post_message(&thread.channel, Some(&thread.ts), part, meta)
                .await?;
        }
    }
    Ok(())
}

/// Posts markdown `text` as mrkdwn, in as many replies as it takes; `metadata` on the last.
async fn post_text(
    api: &WebApi,
    thread: &Thread,
    text: &str,
    metadata: Option<Value>,
) -> Result<(), ApiError> {
    let mut parts = split(&to_mrkdwn(text), PART_LIMIT);
    if parts.is_empty() {
        parts.push("_(no answer)_".to_string());
    }
    let last = parts.len() - 1;
    for (i, part) in parts.iter().enumerate() {
        let meta = if i == last { metadata.clone() } else { None };
        api.post_message(&thread.channel, Some(&thread.ts), part, meta)
            .await?;
    }
    Ok(())
}

fn failure_text(skill: &str, error: &GatewayError, request_id: &str) -> String {
    let body = Problem::of(error).to_json();
    let detail = body["detail"]
        .as_str()
        .or(body["title"].as_str())
        .unwrap_or("the skill failed");
    format!(
        ":warning: `{skill}` could not answer: {detail} ({}, request `{request_id}`)",
        error.slug()
    )
}

/// Slack message metadata for the last reply.
fn metadata(skill: &str, request_id: &str, status: &str, result: Option<&Value>) -> Value {
    let mut payload = json!({ "skill": skill, "requestId": request_id, "status": status });
    if let Some(result) = result {
        if result.to_string().len() <= METADATA_RESULT_LIMIT {
            payload["result"] = result.clone();
        } else {
            payload["truncated"] = Value::Bool(true);
        }
    }
    json!({ "event_type": RESULT_EVENT, "event_payload": payload })
}
