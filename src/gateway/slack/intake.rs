//! Taking a Slack event in, from the Events API or Socket Mode alike: which events the bot
//! answers (mentions, DMs, channel messages a route listens to; never a bot's message, its own,
//! or an edit), which route and skill take it, then once per `event_id` on any replica (the
//! store's once-only claims) durably queued on [`TOPIC`] for the worker.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::config::slack::{SlackConfig, Target};
use crate::events::{Event, KernelBus};
use crate::gateway::Gateway;
use crate::gateway::queue::{Enqueued, encode, enqueue_once};
use crate::gateway::slack::api::Identity;

/// Where accepted events queue (reserved: only the intake emits there).
pub const TOPIC: &str = "gateway-slack";
/// The queue the worker claims from.
pub const QUEUE: &str = "run";

/// An event as the intake queues it on [`TOPIC`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Queued {
    pub event_id: String,
    pub team_id: Value,
    #[serde(flatten)]
    pub routed: crate::gateway::queue::Routed,
    /// The message the event carried.
    pub message: Incoming,
    pub received_at: u64,
}

impl crate::gateway::queue::Job for Queued {
    const VERSION: u64 = 1;
}
/// How long an `event_id` is remembered: Slack retries within minutes; a day is ample.
const DEDUPE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// What happened to an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    Queued,
    /// The same `event_id` was taken before (a retry, or another replica).
    Duplicate,
    /// Not for the bot; why.
    Ignored(&'static str),
}

/// A message the bot may answer (queued with its event; `addressed` is the intake's alone).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Incoming {
    pub channel: String,
    pub channel_type: String,
    pub user: String,
    /// The text with the bot's mention removed.
    pub text: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    /// A mention or a DM (the bot was spoken to), not a plain channel message.
    #[serde(skip)]
    pub addressed: bool,
    pub files: Vec<Value>,
}

/// The route's decision: the skill, its args, and whether a command route refused the name.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    pub skill: String,
    pub args: Map<String, Value>,
    /// Named in the message by a command route: the gateway's policy decides if it may run.
    pub named: bool,
    /// A command route's `skills` do not include it.
    pub refused: bool,
}

/// The intake of one server.
pub struct Intake {
    gateway: Gateway,
    /// Its routes and `default` follow a reload ([`Intake::reroute`]).
    config: ArcSwap<SlackConfig>,
    identity: RwLock<Option<Identity>>,
}

impl Intake {
    pub fn new(gateway: Gateway, config: Arc<SlackConfig>) -> Intake {
        Intake {
            gateway,
            config: ArcSwap::new(config),
            identity: RwLock::new(None),
        }
    }

    /// Routes messages with `config`'s routes and `default` from now on (a reload); its tokens,
    /// API URL and paces are kept as the door was made with them (see
    /// [`super::setup::keep_restart_settings`]).
    pub fn reroute(&self, config: SlackConfig) {
        self.config.store(Arc::new(config));
    }

    /// Who the bot is, once `auth.test` said it.
    pub fn set_identity(&self, identity: Identity) {
        *self.identity.write() = Some(identity);
    }

    pub fn identity(&self) -> Option<Identity> {
        self.identity.read().clone()
    }

    /// Takes an Events API payload (`event_callback`). An error means nothing was queued and
    /// Slack should send it again.
    pub async fn accept(&self, payload: &Value) -> Result<Accepted, String> {
        if payload["type"] != "event_callback" {
            return Ok(Accepted::Ignored("not an event callback"));
        }
        let Some(event_id) = payload["event_id"].as_str() else {
            return Ok(Accepted::Ignored("no event_id"));
        };
        let identity = self.identity();
        let incoming = match classify(&payload["event"], identity.as_ref()) {
            Ok(incoming) => incoming,
            Err(why) => return Ok(Accepted::Ignored(why)),
        };
        let Some(routed) = route(&self.config.load(), &incoming) else {
            return Ok(Accepted::Ignored("no route takes it"));
        };
        let mut event = Event::new(TOPIC, "event");
        event.source = Some("slack".into());
        event.data = Some(encode(&Queued {
            event_id: event_id.to_string(),
            team_id: payload["team_id"].clone(),
            routed: crate::gateway::queue::Routed {
                skill: routed.skill,
                args: Value::Object(routed.args),
                named: routed.named,
                refused: routed.refused,
            },
            message: incoming,
            received_at: crate::context::id::now_ms(),
        }));

        let key = format!("slack-event:{event_id}");
        let bus = self.gateway.kernel.bus();
        if enqueue_once(bus, &key, "-", DEDUPE_WINDOW, &event, "{}").await? != Enqueued::Queued {
            return Ok(Accepted::Duplicate);
        }
        Ok(Accepted::Queued)
    }
}

/// Subtypes that are still a person's message (others are edits, deletions, joins, bots).
const PERSON_SUBTYPES: [&str; 2] = ["file_share", "thread_broadcast"];

/// Whether the bot answers `event`, and what it says.
pub fn classify(event: &Value, me: Option<&Identity>) -> Result<Incoming, &'static str> {
    let s = |k: &str| event[k].as_str().unwrap_or_default().to_string();
    if event.get("bot_id").is_some_and(|b| !b.is_null()) || event["subtype"] == "bot_message" {
        return Err("a bot's message");
    }
    let user = s("user");
    if me.is_some_and(|me| !me.user_id.is_empty() && me.user_id == user) {
        return Err("the bot's own message");
    }
    if let Some(subtype) = event["subtype"].as_str()
        && !PERSON_SUBTYPES.contains(&subtype)
    {
        return Err("an edit, a deletion or a system message");
    }
    if event.get("edited").is_some() {
        return Err("an edit");
    }
    if user.is_empty() {
        return Err("no user");
    }
    let raw = s("text");
    let channel_type = s("channel_type");
    let addressed = match event["type"].as_str() {
        Some("app_mention") => true,
        Some("message") if channel_type == "im" => true,
        Some("message") => {
            if me.is_some_and(|me| raw.contains(&format!("<@{}", me.user_id))) {
                // Slack sends the mention as `app_mention` too: answered once, from there.
                return Err("a mention, answered from its app_mention event");
            }
            false
        }
        _ => return Err("an event the bot does not answer"),
    };
    let text = strip_mention(
        &raw,
        me.map(|m| m.user_id.as_str()),
        event["type"] == "app_mention",
    );
    let files = event["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .map(|f| {
                    json!({
                        "id": f["id"], "name": f["name"], "mimetype": f["mimetype"],
                        "size": f["size"], "urlPrivate": f["url_private"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Incoming {
        channel: s("channel"),
        channel_type,
        user,
        text,
        ts: s("ts"),
        thread_ts: event["thread_ts"].as_str().map(str::to_string),
        addressed,
        files,
    })
}

/// The text without the bot's mentions (`<@U123>` or `<@U123|name>`); when the bot's id is
/// not known yet, a mention event loses its leading mention.
fn strip_mention(text: &str, me: Option<&str>, mention_event: bool) -> String {
    let mut out = text.to_string();
    match me.filter(|m| !m.is_empty()) {
        Some(me) => {
            let open = format!("<@{me}");
            while let Some(at) = out.find(&open) {
                let Some(end) = out[at..].find('>') else {
                    break;
                };
                out.replace_range(at..at + end + 1, "");
            }
        }
        None if mention_event => {
            let trimmed = out.trim_start();
            if trimmed.starts_with("<@")
                && let Some(end) = trimmed.find('>')
            {
                out = trimmed[end + 1..].to_string();
            }
        }
        None => {}
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first route that takes `incoming`, else the default for a mention or DM.
pub fn route(config: &SlackConfig, incoming: &Incoming) -> Option<Routed> {
    let text = incoming.text.as_str();
    for route in &config.routes {
        if route
            .channel
            .as_ref()
            .is_some_and(|c| *c != incoming.channel)
        {
            continue;
        }
        if !incoming.addressed && !route.messages {
            continue;
        }
        let mut args = Map::new();
        args.insert("text".into(), Value::from(text));
        if let Some(pattern) = &route.pattern {
            let Some(found) = pattern.captures(text) else {
                continue;
            };
            for name in pattern.capture_names().flatten() {
                if let Some(m) = found.name(name) {
                    args.insert(name.to_string(), Value::from(m.as_str()));
                }
            }
        }
        match &route.target {
            Target::Skill(skill) => {
                return Some(Routed {
                    skill: skill.clone(),
                    args,
                    named: false,
                    refused: false,
                });
            }
            Target::Command { skills } => {
                let (word, rest) = match text.split_once(char::is_whitespace) {
                    Some((word, rest)) => (word, rest.trim()),
                    None => (text, ""),
                };
                if word.is_empty() {
                    continue;
                }
                return Some(Routed {
                    skill: word.to_string(),
                    args: command_args(rest),
                    named: true,
                    refused: !skills.is_match(word),
                });
            }
        }
    }
    if !incoming.addressed {
        return None;
    }
    config.default.as_ref().map(|skill| {
        let mut args = Map::new();
        args.insert("text".into(), Value::from(text));
        Routed {
            skill: skill.clone(),
            args,
            named: false,
            refused: false,
        }
    })
}

/// A command's args: a JSON object, else `{text}`. (Slack's clients turn quotes curly.)
fn command_args(rest: &str) -> Map<String, Value> {
    let straight = rest.replace(['\u{201c}', '\u{201d}'], "\"");
    if straight.starts_with('{')
        && let Ok(Value::Object(map)) = serde_json::from_str(&straight)
    {
        return map;
    }
    let mut args = Map::new();
    if !rest.is_empty() {
        args.insert("text".into(), Value::from(rest));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::slack::SlackSettings;

    fn me() -> Identity {
        Identity {
            user_id: "UBOT".into(),
            bot_id: "BBOT".into(),
            ..Identity::default()
        }
    }

    fn config(yaml: &str) -> SlackConfig {
        let settings: SlackSettings = serde_saphyr::from_str(yaml).unwrap();
        SlackConfig::resolve(settings, &|name| {
            (name == "SLACK_BOT_TOKEN" || name == "SLACK_SIGNING_SECRET").then(|| "x".into())
        })
        .unwrap()
        .unwrap()
    }

    #[test]
    fn a_mention_loses_the_bots_mention_and_keeps_the_thread() {
        let event = json!({ "type": "app_mention", "user": "U1", "text": "<@UBOT> summarize  this", "channel": "C1", "ts": "2.0", "thread_ts": "1.0" });
        let got = classify(&event, Some(&me())).unwrap();
        assert_eq!(got.text, "summarize this");
        assert_eq!(got.thread_ts.as_deref(), Some("1.0"));
        assert!(got.addressed);
    }

    #[test]
    fn bots_the_bot_itself_and_edits_are_ignored() {
        for event in [
            json!({ "type": "message", "channel_type": "im", "user": "U2", "bot_id": "B9", "text": "hi" }),
            json!({ "type": "message", "channel_type": "im", "user": "UBOT", "text": "hi" }),
            json!({ "type": "message", "channel_type": "im", "subtype": "message_changed", "message": {} }),
            json!({ "type": "app_mention", "user": "U1", "text": "<@UBOT> x", "edited": { "ts": "1" } }),
            json!({ "type": "message", "channel_type": "channel", "user": "U1", "text": "<@UBOT> x" }),
            json!({ "type": "reaction_added", "user": "U1" }),
        ] {
            assert!(classify(&event, Some(&me())).is_err(), "{event}");
        }
    }

    #[test]
    fn a_route_with_a_pattern_turns_named_groups_into_args() {
        let config = config(
            "routes:\n  - { ref: deploy, match: '^deploy (?P<service>\\S+) to (?P<env>\\w+)$' }\ndefault: helper\n",
        );
        let incoming = classify(
            &json!({ "type": "app_mention", "user": "U1", "text": "<@UBOT> deploy api to prod", "channel": "C1", "ts": "1.0" }),
            Some(&me()),
        )
        .unwrap();
        let routed = route(&config, &incoming).unwrap();
        assert_eq!(routed.skill, "deploy");
        assert_eq!(
            Value::Object(routed.args),
            json!({ "text": "deploy api to prod", "service": "api", "env": "prod" })
        );
        let other = Incoming {
            text: "hello".into(),
            ..incoming
        };
        assert_eq!(route(&config, &other).unwrap().skill, "helper");
    }

    #[test]
    fn plain_channel_messages_only_reach_a_route_that_listens_in_that_channel() {
        let config =
            config("routes:\n  - { ref: triage, channel: C7, messages: true }\ndefault: helper\n");
        let plain = Incoming {
            channel: "C7".into(),
            channel_type: "channel".into(),
            user: "U1".into(),
            text: "the build is red".into(),
            ts: "1.0".into(),
            thread_ts: None,
            addressed: false,
            files: vec![],
        };
        assert_eq!(route(&config, &plain).unwrap().skill, "triage");
        let elsewhere = Incoming {
            channel: "C8".into(),
            ..plain
        };
        assert_eq!(
            route(&config, &elsewhere),
            None,
            "the default is for mentions and DMs"
        );
    }

    #[test]
    fn a_command_route_takes_the_skill_from_the_first_word_and_json_args() {
        let config = config("routes:\n  - { command: true, skills: ['report-*'] }\n");
        let incoming = |text: &str| Incoming {
            channel: "D1".into(),
            channel_type: "im".into(),
            user: "U1".into(),
            text: text.into(),
            ts: "1.0".into(),
            thread_ts: None,
            addressed: true,
            files: vec![],
        };
        let routed = route(
            &config,
            &incoming("report-sales {\u{201c}month\u{201d}: \u{201c}2026-11\u{201d}}"),
        )
        .unwrap();
        assert_eq!(routed.skill, "report-sales");
        assert_eq!(Value::Object(routed.args), json!({ "month": "2026-11" }));
        assert!(!routed.refused);
        let routed = route(&config, &incoming("delete-all now")).unwrap();
        assert!(routed.refused);
        assert_eq!(Value::Object(routed.args), json!({ "text": "now" }));
    }
}
