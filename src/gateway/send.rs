//! `gateway-send` and `web-send`: write back to whoever started the run, through the raw
//! response handle the gateway put at `nonlocals.request.res`.

use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::gateway::reply::{RESPONSE_PATH, Reply, ReplyPart};
use crate::middleware::native;
use crate::skills::tool::Tool;

pub fn tools() -> Vec<Tool> {
    vec![gateway_send(), web_send()]
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
    required: [message]
"#,
        |ctx, args| async move {
            let reply = reply_of(&ctx, "gateway-send")?;
            let message = args.get("message").cloned().unwrap_or(Value::Null);
            reply.send(ReplyPart::Message(message)).await?;
            Ok(Some(
                json!({ "sent": true, "transport": reply.transport() }),
            ))
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
      status: { type: integer, minimum: 100, maximum: 999 }
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
            if status.is_some() || !headers.is_empty() {
                let status = u16::try_from(status.unwrap_or(200)).unwrap_or(500);
                reply.head(status, headers).await?;
            }
            if let Some(chunk) = args.get("chunk") {
                reply.chunk(chunk.clone()).await?;
            }
            Ok(Some(json!({ "sent": true })))
        },
    )
}
