//! Running queued Slack events: claims them from [`TOPIC`], runs the routed skill through the
//! shared dispatch (`nonlocals.request` with team, channel, user, text, thread and files;
//! `nonlocals.gateway.replyTo` the channel and thread; `sessionId` the thread, so a follow-up
//! in it continues the session; `gateway-message` announced) and answers in the thread. An
//! event is acked once answered, failed runs included (their error is the answer); one whose
//! answer Slack would not take is logged with its event id and acked too, since running it
//! again would repeat the skill's work.

use std::sync::Arc;

use serde_json::{Map, json};

use crate::events::{Delivery, KernelBus};
use crate::gateway::Host;
use crate::gateway::policy::{Policy, Refusal};
use crate::gateway::queue::Lane;
use crate::gateway::slack::Slack;
use crate::gateway::slack::intake::{QUEUE, Queued, TOPIC};
use crate::gateway::slack::reply::{self, Thread};
use crate::gateway::{Gateway, GatewayError, Inbound};
use crate::kernel::ToolRef;
use crate::kernel::authority::Authority;

/// Answers one event, then acks it.
pub async fn run(host: Host, slack: Arc<Slack>, queued: Queued, delivery: Delivery) {
    let (gateway, policy, timeout) = (&host.gateway, &host.policy, host.timeout);
    let bus = gateway.kernel.bus().clone();
    // The queue's event id where Slack's own was not kept (payloads of earlier releases).
    let event_id = Some(queued.event_id.clone())
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| delivery.event.id.clone());
    let skill = queued.routed.skill.clone();
    let message = &queued.message;
    let channel = message.channel.clone();
    let root = message
        .thread_ts
        .clone()
        .unwrap_or_else(|| message.ts.clone());
    let thread = Thread {
        channel: channel.clone(),
        ts: root.clone(),
    };
    let answered = match reach(gateway, policy, &queued, &skill) {
        Err(refusal) => reply::refuse(&slack.api, &thread, &skill, &event_id, &refusal).await,
        Ok(name) => {
            let team = queued.team_id.as_str().unwrap_or_default();
            let args = queued.routed.args.clone();
            let mut request = Map::new();
            for (key, value) in [
                ("team", json!(team)),
                ("channel", json!(channel)),
                ("channelType", json!(message.channel_type)),
                ("user", json!(message.user)),
                ("text", json!(message.text)),
                ("ts", json!(message.ts)),
                ("threadTs", json!(root)),
                ("files", json!(message.files)),
                ("eventId", json!(event_id)),
            ] {
                request.insert(key.to_string(), value);
            }
            let principal =
                crate::gateway::principal::peer(&format!("slack:{team}:{}", message.user));
            // A skill the message named runs as the sender's call; one the project's route
            // chose runs as the project's code serving the sender.
            let authority = if queued.routed.named {
                Authority::caller(principal)
            } else {
                Authority::serving(principal)
            };
            let inbound = Inbound {
                transport: "slack",
                skill: ToolRef::Name(Arc::from(name.as_str())),
                tool: None,
                authority,
                announce: Some(json!({
                    "channel": channel,
                    "user": message.user,
                    "text": message.text,
                    "threadTs": root,
                })),
                args,
                request,
                request_id: event_id.clone(),
                reply_to: json!({ "channel": channel, "threadTs": root }),
                follow: false,
                duplex: false,
                timeout: Some(timeout),
                session: Some(format!("slack:{team}:{channel}:{root}")),
                // Queued: bounded by the worker, not by a client's share.
                client: None,
            };
            let dispatch = gateway.dispatch(inbound);
            reply::answer(
                &slack.api,
                &thread,
                dispatch,
                &skill,
                &event_id,
                slack.config.update_interval,
            )
            .await
            .map(|_| ())
        }
    };
    if let Err(err) = answered {
        tracing::error!(event_id, skill, channel, error = %err, "the answer could not be posted to Slack");
        if err.is_auth() {
            slack.auth_failed(gateway);
        }
    }
    if let Err(err) = bus.ack(TOPIC, QUEUE, &[delivery.receipt], false).await {
        tracing::warn!(event_id, error = %err, "acking a Slack event failed; it may be answered again");
    }
}

/// The skill to run, or why not.
fn reach(
    gateway: &Gateway,
    policy: &Policy,
    queued: &Queued,
    skill: &str,
) -> Result<String, GatewayError> {
    if queued.routed.refused {
        return Err(Refusal::Unknown {
            skill: skill.to_string(),
            suggestions: Vec::new(),
        }
        .into());
    }
    let index = gateway.kernel.registry().current();
    policy
        .reach_message(&index, skill, queued.routed.named)
        .map(|tool| tool.name.clone())
        .map_err(GatewayError::from)
}

/// Where queued events wait, and how many are answered at once.
pub fn lane() -> Lane {
    Lane::new(TOPIC, QUEUE, 8)
}
