//! `gateway-send` and `web-send`: write back to whoever started the run, through the raw
//! response handle the gateway put at `nonlocals.request.res`.

use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::gateway::reply::{RESPONSE_PATH, Reply, ReplyPart, chunk_bytes};
use crate::skills::native::native;
use crate::skills::tool::Tool;

pub fn tools() -> Vec<Tool> {
    vec![
        gateway_send(),
        gateway_receive(),
        // Taking over the HTTP response (a redirect, a cookie, a page) is the project's: a web
        // route's skill may, a caller naming it directly needs `admin`, untrusted code never.
        web_send().class(crate::kernel::authority::ToolClass::ControlPlane),
    ]
}

fn reply_of(ctx: &Context, tool: &str) -> Result<std::sync::Arc<Reply>> {
    ctx.extension::<Reply>(RESPONSE_PATH).ok_or_else(|| {
        SkillError::failed(format!(
            "`{tool}` needs a gateway: this run was not started by a transport (HTTP, WebSocket, webhook, Slack, email)"
        ))
    })
}

fn gateway_send() -> Tool {
    native(
        r#"
name: gateway-send
description: Send a message back over the transport that started this run (an HTTP stream, a WebSocket, a Slack thread, an email reply).
metadata:
  tags: [gateway]
  params:
    type: object
    properties:
      message: { description: "Text or any JSON value." }
      partial: { type: boolean, description: "The message is the next piece of an answer being written (text): Slack shows the pieces growing in one message, SSE streams them as `chunk` events, a JSON answer leaves them out." }
    required: [message]
"#,
        |ctx, args| async move {
            let reply = reply_of(&ctx, "gateway-send")?;
            let message = args.get("message").cloned().unwrap_or(Value::Null);
            let part = if args.get("partial") == Some(&Value::Bool(true)) {
                ReplyPart::Partial(match message {
                    Value::String(text) => text,
                    other => other.to_string(),
                })
            } else {
                ReplyPart::Message(message)
            };
            reply.send(part).await?;
            Ok(Some(
                json!({ "sent": true, "transport": reply.transport() }),
            ))
        },
    )
}

/// How long `gateway-receive` waits when the caller does not say.
const RECEIVE_DEFAULT_MS: u64 = 30_000;

fn gateway_receive() -> Tool {
    native(
        r#"
name: gateway-receive
description: "Wait for the next message the client sends this run over the transport that started it (a WebSocket `message` frame). Returns `{received: true, message}`, or `{received: false}` when none came in time."
metadata:
  tags: [gateway]
  params:
    type: object
    properties:
      timeout: { type: integer, minimum: 0, maximum: 3600000, description: "Milliseconds to wait (default 30000)." }
"#,
        |ctx, args| async move {
            let reply = reply_of(&ctx, "gateway-receive")?;
            let wait = args
                .get("timeout")
                .and_then(Value::as_u64)
                .unwrap_or(RECEIVE_DEFAULT_MS);
            let received = tokio::select! {
                got = reply.receive(ctx.bounded_wait(std::time::Duration::from_millis(wait))) => got?,
                () = ctx.cancelled() => return Err(ctx.abort_error().unwrap_or_else(|| SkillError::new(ErrorKind::Aborted, "aborted"))),
            };
            Ok(Some(match received {
                Some(message) => json!({ "received": true, "message": message }),
                None => json!({ "received": false }),
            }))
        },
    )
}

fn web_send() -> Tool {
    native(
        r#"
name: web-send
description: "Write the HTTP response directly: status and headers once, then body chunks that stream as they are sent."
metadata:
  tags: [gateway]
  params:
    type: object
    properties:
      status: { type: integer, minimum: 200, maximum: 999, description: "A final status: informational (1xx) responses are the server's." }
      headers:
        type: object
        additionalProperties: { type: string }
      chunk: { description: "A body chunk: a string as is, anything else as JSON." }
"#,
        |ctx, args| async move {
            let reply = reply_of(&ctx, "web-send")?;
            if reply.transport() != "http" {
                return Err(SkillError::new(
                    ErrorKind::Failed,
                    format!(
                        "`web-send` writes HTTP responses; this run came over {} (use gateway-send)",
                        reply.transport()
                    ),
                ));
            }
            let status = args.get("status").and_then(Value::as_u64);
            let headers: Vec<(String, String)> = args
                .get("headers")
                .and_then(Value::as_object)
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let chunk = args.get("chunk");
            let mut whole = false;
            if status.is_some() || !headers.is_empty() {
                whole = check_framing(&headers, chunk)?;
                let status = u16::try_from(status.unwrap_or(200)).unwrap_or(500);
                reply.head(status, headers).await?;
            }
            if let Some(chunk) = chunk {
                reply.chunk(chunk.clone()).await?;
            }
            if whole {
                reply.complete();
            }
            Ok(Some(json!({ "sent": true })))
        },
    )
}

/// Framing is the server's, and a head that contradicts its body ends the connection instead of
/// answering, so it is refused before anything is sent: no `transfer-encoding`, and a
/// `content-length` only with the whole body in the same call. True when the head declares the
/// length (then no chunk may follow).
fn check_framing(headers: &[(String, String)], chunk: Option<&Value>) -> Result<bool> {
    let invalid = |message: String| SkillError::new(ErrorKind::InvalidArgs, message);
    let mut declared = None;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(invalid(
                "`transfer-encoding`: skillgate frames the body itself; leave it out (without `content-length` the body streams)".into(),
            ));
        }
        if !name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        if declared.is_some() {
            return Err(invalid("`content-length` is given twice".into()));
        }
        let digits = value.trim();
        let length = digits
            .parse::<u64>()
            .ok()
            .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                invalid(format!(
                    "`content-length` must be a number of bytes, got `{value}`"
                ))
            })?;
        declared = Some(length);
    }
    let Some(length) = declared else {
        return Ok(false);
    };
    let sent = chunk.map_or(0, |c| chunk_bytes(c.clone()).len() as u64);
    if sent != length {
        return Err(invalid(format!(
            "`content-length` is {length} but the body sent with it has {sent} bytes: send the whole body in the same call (`chunk`), or leave `content-length` out and the body streams"
        )));
    }
    Ok(true)
}
