//! Running queued mail: claims it from [`TOPIC`], runs the routed skill through the shared
//! dispatch (`nonlocals.request` with from, to, cc, subject, text, html, message id, in-reply-to
//! and attachment metadata; `nonlocals.gateway.replyTo` the sender and the thread ids;
//! `sessionId` the thread, for a verified sender only; `gateway-message` with from, subject and
//! body) and answers in one mail to the `From` address: the `gateway-send` messages, then the
//! result (or the failure). No answer to mail that must not get one (RFC 3834), and at most one
//! per sender per reply window, across replicas.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::events::{Delivery, KernelBus, KeyClaim};
use crate::gateway::Host;
use crate::gateway::email::Email;
use crate::gateway::email::intake::{QUEUE, Queued, TOPIC};
use crate::gateway::email::parse::Mail;
use crate::gateway::email::thread;
use crate::gateway::problem::Problem;
use crate::gateway::queue::{Lane, Routed};
use crate::gateway::reply::{Gathered, as_markdown, gather};
use crate::gateway::{Gateway, GatewayError, Inbound};
use crate::kernel::ToolRef;
use crate::kernel::authority::Authority;

/// Answers one mail (see the module's note), then acks it.
pub async fn run(host: Host, email: Arc<Email>, queued: Queued, delivery: Delivery) {
    let (gateway, policy, timeout) = (&host.gateway, &host.policy, host.timeout);
    let bus = gateway.kernel.bus().clone();
    let id = delivery.event.id.clone();
    let receipt = delivery.receipt;
    let mail = Mail::from_json(&queued.mail);
    let Routed {
        skill,
        args,
        named,
        refused,
    } = queued.routed;
    let request_id = format!("mail-{id}");
    let principal = format!("email:{}", mail.from.to_ascii_lowercase());
    // Only a verified sender's mail belongs to a conversation (one the server can vouch for).
    let thread = if queued.verified {
        conversation(gateway, &principal, &mail, &id).await
    } else {
        None
    };
    let index = gateway.kernel.registry().current();
    // A command route's `skills` left the named skill out: refused as if it did not exist.
    let reached = if refused {
        Err(crate::gateway::policy::Refusal::Unknown {
            skill: skill.clone(),
            suggestions: Vec::new(),
        })
    } else {
        policy.reach_message(&index, &skill, named)
    };
    let (text, status) = match reached {
        Err(refusal) => failure(&GatewayError::from(refusal), &skill, &request_id),
        Ok(tool) => {
            let mut request = match mail.to_json() {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            request.insert("envelopeFrom".into(), queued.envelope_from);
            request.insert("recipients".into(), queued.recipients);
            let principal = crate::gateway::principal::peer(&principal);
            let authority = if named {
                Authority::caller(principal)
            } else {
                Authority::serving(principal)
            };
            let inbound = Inbound {
                transport: "email",
                skill: ToolRef::Name(Arc::from(tool.name.as_str())),
                tool: Some(tool),
                authority,
                args,
                request,
                request_id: request_id.clone(),
                reply_to: json!({
                    "address": mail.from,
                    "messageId": mail.message_id,
                    "references": mail.references,
                }),
                announce: Some(
                    json!({ "from": mail.from, "subject": mail.subject, "body": mail.text }),
                ),
                follow: false,
                duplex: false,
                timeout: Some(timeout),
                session: thread.as_ref().map(|t| format!("email:{t}")),
                // Queued: bounded by the worker, not by a client's share.
                client: None,
            };
            let mut dispatch = gateway.dispatch(inbound);
            let Gathered {
                messages,
                partial,
                outcome,
            } = gather(&mut dispatch.parts).await;
            let mut said: Vec<String> = messages.iter().map(as_markdown).collect();
            match outcome {
                Some(Ok(result)) => {
                    let value = result.map_or(Value::Null, Arc::unwrap_or_clone);
                    if !partial.is_empty() && value != Value::String(partial.clone()) {
                        said.push(partial);
                    }
                    said.push(as_markdown(&value));
                    (said.join("\n\n"), "ok".to_string())
                }
                Some(Err(err)) => failure(
                    &GatewayError::from_run(&err, &skill, &request_id),
                    &skill,
                    &request_id,
                ),
                None => failure(
                    &GatewayError::Internal {
                        cause: "the run ended without an answer".into(),
                        run: None,
                    },
                    &skill,
                    &request_id,
                ),
            }
        }
    };
    if let Some(why) = queued.no_reply.as_deref() {
        tracing::info!(from = mail.from, why, "no answer to this mail (RFC 3834)");
    } else if may_answer(gateway, &mail, email.config.reply_window).await {
        let ours = email.mailer.message_id();
        if let Some(thread) = &thread
            && let Err(err) = thread::remember(
                gateway.kernel.bus().store().as_ref(),
                &principal,
                &ours,
                thread,
            )
            .await
        {
            tracing::warn!(request_id, error = %err, "the answer's Message-ID could not be kept with its thread");
        }
        if let Err(err) = email
            .mailer
            .answer(&mail, &ours, &text, &status, &request_id)
            .await
        {
            tracing::error!(request_id, to = mail.from, error = %err, "the answer could not be sent");
        }
    } else {
        tracing::info!(
            to = mail.from,
            "an answer was sent to this sender within the reply window; no other now"
        );
    }
    if let Err(err) = bus.ack(TOPIC, QUEUE, &[receipt], false).await {
        tracing::warn!(request_id, error = %err, "acking a mail failed; it may be answered again");
    }
}

/// The thread of a verified sender's mail (see [`thread`]); `None` when the store cannot say.
async fn conversation(gateway: &Gateway, principal: &str, mail: &Mail, id: &str) -> Option<String> {
    let own = mail
        .message_id
        .clone()
        .unwrap_or_else(|| format!("mail-{id}"));
    let answers: Vec<String> = mail
        .in_reply_to
        .iter()
        .chain(mail.references.iter().rev())
        .cloned()
        .collect();
    match thread::of(
        gateway.kernel.bus().store().as_ref(),
        principal,
        &own,
        &answers,
    )
    .await
    {
        Ok(thread) => Some(thread),
        Err(err) => {
            tracing::warn!(error = %err, "the mail's thread could not be looked up; it runs without a session");
            None
        }
    }
}

/// One answer per sender per window, on any replica.
async fn may_answer(gateway: &Gateway, mail: &Mail, window: Duration) -> bool {
    if window.is_zero() {
        return true;
    }
    let key = format!("email-answered:{}", mail.from);
    matches!(
        gateway
            .kernel
            .bus()
            .store()
            .claim_key(&key, "-", window)
            .await,
        Ok(KeyClaim::Won)
    )
}

fn failure(error: &GatewayError, skill: &str, request_id: &str) -> (String, String) {
    let problem = Problem::of(error).to_json();
    let slug = error.slug().to_string();
    let detail = problem["detail"]
        .as_str()
        .or(problem["title"].as_str())
        .unwrap_or("the skill failed");
    (
        format!("`{skill}` could not answer: {detail}\n\n({slug}, request {request_id})"),
        slug,
    )
}

/// Where queued mail waits, and how many mails are answered at once.
pub fn lane() -> Lane {
    Lane::new(TOPIC, QUEUE, 8)
}
