//! Running queued Slack events: claims them from [`TOPIC`], runs the routed skill through the
//! shared dispatch (`nonlocals.request` with team, channel, user, text, thread and files;
//! `nonlocals.gateway.replyTo` the channel and thread; `sessionId` the thread, so a follow-up
//! in it continues the session; `gateway-message` announced) and answers in the thread. An
//! event is acked once answered, failed runs included (their error is the answer); one whose
//! answer Slack would not take is logged with its event id and acked too, since running it
//! again would repeat the skill's work.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::events::{Delivery, KernelBus};
use crate::gateway::Host;
use crate::gateway::policy::{Policy, Refusal};
use crate::gateway::slack::Slack;
use crate::gateway::slack::intake::{QUEUE, TOPIC};
use crate::gateway::slack::reply::{self, Thread};
use crate::gateway::{Gateway, GatewayError, Inbound};
use crate::kernel::ToolRef;
use crate::kernel::authority::Authority;

/// Events answered at once.
const CONCURRENCY: usize = 8;

/// Makes the queue before any event is taken.
pub async fn prepare(gateway: &Gateway) -> Result<(), String> {
    crate::gateway::queue::prepare(gateway.kernel.bus(), TOPIC, QUEUE).await
}

/// Starts the worker on the server's background tracker until the server stops; its runs are
/// tracked there too.
pub fn spawn(host: &Host, slack: Arc<Slack>) {
    let (gateway, policy, timeout) = (host.gateway.clone(), host.policy.clone(), host.timeout);
    crate::gateway::queue::spawn(host, TOPIC.into(), QUEUE, CONCURRENCY, move |delivery| {
        let (gateway, policy, slack) = (gateway.clone(), policy.clone(), slack.clone());
        async move { run(&gateway, &policy, &slack, delivery, timeout).await }
    });
}

/// Answers one event, then acks it.
async fn run(
    gateway: &Gateway,
    policy: &Policy,
    slack: &Slack,
    delivery: Delivery,
    timeout: Duration,
) {
    let bus = gateway.kernel.bus().clone();
    let id = delivery.event.id.clone();
    let receipt = delivery.receipt;
    let data = delivery.event.data.clone().unwrap_or(Value::Null);
    let event_id = data["eventId"].as_str().unwrap_or(&id).to_string();
    let skill = data["skill"].as_str().unwrap_or_default().to_string();
    let message = &data["message"];
    let s = |k: &str| message[k].as_str().unwrap_or_default().to_string();
    let channel = s("channel");
    let root = message["threadTs"]
        .as_str()
        .map_or_else(|| s("ts"), str::to_string);
    let thread = Thread {
        channel: channel.clone(),
        ts: root.clone(),
    };
    let answered = match reach(gateway, policy, &data, &skill) {
        Err(refusal) => reply::refuse(&slack.api, &thread, &skill, &event_id, &refusal).await,
        Ok(name) => {
            let team = data["teamId"].as_str().unwrap_or_default();
            let args = data["args"].clone();
            let mut request = Map::new();
            for (key, value) in [
                ("team", json!(team)),
                ("channel", json!(channel)),
                ("channelType", message["channelType"].clone()),
                ("user", message["user"].clone()),
                ("text", message["text"].clone()),
                ("ts", message["ts"].clone()),
                ("threadTs", json!(root)),
                ("files", message["files"].clone()),
                ("eventId", json!(event_id)),
            ] {
                request.insert(key.to_string(), value);
            }
            let principal = crate::gateway::principal::peer(&format!(
                "slack:{team}:{}",
                message["user"].as_str().unwrap_or_default()
            ));
            // A skill the message named runs as the sender's call; one the project's route
            // chose runs as the project's code serving the sender.
            let authority = if data["named"] == true {
                Authority::caller(principal)
            } else {
                Authority::serving(principal)
            };
            let inbound = Inbound {
                transport: "slack",
                skill: ToolRef::Name(Arc::from(name.as_str())),
                authority,
                announce: Some(json!({
                    "channel": channel,
                    "user": message["user"],
                    "text": message["text"],
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
    if let Err(err) = bus.ack(TOPIC, QUEUE, &[receipt], false).await {
        tracing::warn!(event_id, error = %err, "acking a Slack event failed; it may be answered again");
    }
}

/// The skill to run, or why not.
fn reach(
    gateway: &Gateway,
    policy: &Policy,
    data: &Value,
    skill: &str,
) -> Result<String, GatewayError> {
    if data["refused"] == true {
        return Err(Refusal::Unknown {
            skill: skill.to_string(),
            suggestions: Vec::new(),
        }
        .into());
    }
    let index = gateway.kernel.registry().current();
    policy
        .reach_message(&index, skill, data["named"] == true)
        .map(|tool| tool.name.clone())
        .map_err(GatewayError::from)
}
