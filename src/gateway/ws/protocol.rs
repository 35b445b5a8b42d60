//! The JSON frames of `/ws` (documented in `asyncapi.yaml`): what a client may send, read into
//! [`ClientFrame`] with errors that name the frame type and the field, and the frames the
//! server sends, built by the functions here.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::gateway::GatewayError;
use crate::gateway::problem::Problem;

/// The frame types a client may send.
pub const CLIENT_TYPES: [&str; 9] = [
    "auth",
    "invoke",
    "cancel",
    "message",
    "subscribe",
    "unsubscribe",
    "ack",
    "nack",
    "ping",
];

/// Longest invocation id a client may choose.
const MAX_ID: usize = 128;

/// A frame from the client.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientFrame {
    Auth(Auth),
    Invoke(Invoke),
    Cancel(Target),
    /// A message to a running invocation (`gateway-receive`).
    Message(ToRun),
    Subscribe(Subscribe),
    Unsubscribe(Unsubscribe),
    Ack(EventRef),
    Nack(EventRef),
    Ping,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Auth {
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Invoke {
    pub id: String,
    pub skill: String,
    #[serde(default)]
    pub args: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Target {
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ToRun {
    pub id: String,
    pub message: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Subscribe {
    pub topic: String,
    /// A consumer group: each event goes to one member, which acks or nacks it.
    #[serde(default)]
    pub group: Option<String>,
    /// Resume after this event id (from the durable buffer); without a group only.
    #[serde(default)]
    pub from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Unsubscribe {
    pub topic: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRef {
    pub event_id: String,
}

/// A frame that could not be read: the error to answer, and the invocation id it named, if
/// one could be read (so the client can match the answer).
#[derive(Debug, Clone, PartialEq)]
pub struct FrameError {
    pub error: GatewayError,
    pub id: Option<String>,
}

impl ClientFrame {
    /// Reads one text frame.
    pub fn parse(text: &str) -> Result<ClientFrame, FrameError> {
        let value: Value = serde_json::from_str(text).map_err(|e| FrameError {
            error: GatewayError::malformed_json(&e),
            id: None,
        })?;
        let id = value.get("id").and_then(Value::as_str).map(str::to_string);
        let bad = |detail: String| FrameError {
            error: GatewayError::MalformedJson { detail, at: None },
            id: id.clone(),
        };
        let Some(kind) = value.get("type") else {
            return Err(bad(format!(
                "a frame is a JSON object with a `type` ({})",
                CLIENT_TYPES.join(", ")
            )));
        };
        let Some(kind) = kind.as_str() else {
            return Err(bad("`type` must be a string".into()));
        };
        let kind = kind.to_string();
        let frame = match kind.as_str() {
            "auth" => ClientFrame::Auth(read(&kind, value).map_err(bad)?),
            "invoke" => {
                let invoke: Invoke = read(&kind, value).map_err(bad)?;
                check_id(&invoke.id).map_err(bad)?;
                if invoke.args.as_ref().is_some_and(|a| !a.is_object()) {
                    return Err(bad("invoke.args: must be a JSON object of args".into()));
                }
                ClientFrame::Invoke(invoke)
            }
            "cancel" => ClientFrame::Cancel(read(&kind, value).map_err(bad)?),
            "message" => ClientFrame::Message(read(&kind, value).map_err(bad)?),
            "subscribe" => {
                let subscribe: Subscribe = read(&kind, value).map_err(bad)?;
                if subscribe.group.is_some() && subscribe.from.is_some() {
                    return Err(bad(
                        "subscribe.from: a consumer group keeps its own place (unacked events come back); `from` is for subscriptions without a group".into(),
                    ));
                }
                ClientFrame::Subscribe(subscribe)
            }
            "unsubscribe" => ClientFrame::Unsubscribe(read(&kind, value).map_err(bad)?),
            "ack" => ClientFrame::Ack(read(&kind, value).map_err(bad)?),
            "nack" => ClientFrame::Nack(read(&kind, value).map_err(bad)?),
            "ping" => ClientFrame::Ping,
            other => {
                return Err(bad(format!(
                    "unknown frame type `{other}` (known: {})",
                    CLIENT_TYPES.join(", ")
                )));
            }
        };
        Ok(frame)
    }
}

/// One frame type's fields; a mistake names the field (`invoke.skill: missing field`).
fn read<T: DeserializeOwned>(kind: &str, value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        if path == "." || path.is_empty() {
            format!("{kind}: {message}")
        } else {
            format!("{kind}.{path}: {message}")
        }
    })
}

fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID {
        return Err(format!(
            "invoke.id: must be 1 to {MAX_ID} characters, chosen by the client to match answers"
        ));
    }
    Ok(())
}

/// Frames the server sends.
pub mod out {
    use super::*;

    /// The first frame: the connection's id, and whether it still needs an `auth` frame.
    pub fn welcome(connection: &str, needs_auth: bool) -> Value {
        json!({ "type": "welcome", "connection": connection, "authenticated": !needs_auth })
    }

    pub fn authenticated(key: Option<&str>) -> Value {
        json!({ "type": "authenticated", "key": key })
    }

    pub fn result(id: &str, value: Value) -> Value {
        json!({ "type": "result", "id": id, "value": value })
    }

    /// An error answering a frame (with its invocation id when there is one).
    pub fn error(id: Option<&str>, err: &GatewayError) -> Value {
        let mut frame = Map::new();
        frame.insert("type".into(), json!("error"));
        if let Some(id) = id {
            frame.insert("id".into(), json!(id));
        }
        frame.insert("problem".into(), Problem::of(err).to_json());
        Value::Object(frame)
    }

    pub fn message(id: &str, message: Value) -> Value {
        json!({ "type": "message", "id": id, "message": message })
    }

    pub fn partial(id: &str, text: String) -> Value {
        json!({ "type": "partial", "id": id, "text": text })
    }

    pub fn log(id: &str, log: &Value) -> Value {
        json!({ "type": "log", "id": id, "log": log })
    }

    /// A bus event of a running invocation.
    pub fn run_event(id: &str, event: Value) -> Value {
        json!({ "type": "event", "id": id, "event": event })
    }

    /// `missed` log events, bus events or text pieces of invocation `id` were left out: the
    /// client read more slowly than the run produced them.
    pub fn run_gap(id: &str, missed: u64) -> Value {
        json!({ "type": "gap", "id": id, "missed": missed })
    }

    /// An event of a subscription; `eventId` is its durable id (resume from it, ack it).
    pub fn topic_event(topic: &str, group: Option<&str>, event: &crate::events::Event) -> Value {
        json!({ "type": "event", "topic": topic, "group": group, "eventId": event.id, "event": event })
    }

    /// [`topic_event`] for a plain subscription, from the envelope's JSON serialized once for
    /// every follower.
    pub fn followed_event(topic: &str, tailed: &crate::events::tail::Tailed) -> String {
        let quoted = |s: &str| Value::String(s.to_string()).to_string();
        format!(
            r#"{{"type":"event","topic":{},"group":null,"eventId":{},"event":{}}}"#,
            quoted(topic),
            quoted(&tailed.event.id),
            tailed.json
        )
    }

    pub fn subscribed(topic: &str, group: Option<&str>, resumed_with_gap: bool) -> Value {
        json!({ "type": "subscribed", "topic": topic, "group": group, "gap": resumed_with_gap })
    }

    pub fn unsubscribed(topic: &str) -> Value {
        json!({ "type": "unsubscribed", "topic": topic })
    }

    /// Events of a subscription may be missing here (they left the buffer unread).
    pub fn gap(topic: &str) -> Value {
        json!({ "type": "gap", "topic": topic })
    }

    pub fn pong() -> Value {
        json!({ "type": "pong" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(text: &str) -> String {
        match ClientFrame::parse(text) {
            Err(FrameError { error, .. }) => error.to_string(),
            Ok(frame) => panic!("parsed: {frame:?}"),
        }
    }

    #[test]
    fn frames_read_into_their_types() {
        assert_eq!(
            ClientFrame::parse(r#"{"type":"invoke","id":"1","skill":"hello","args":{"a":1}}"#),
            Ok(ClientFrame::Invoke(Invoke {
                id: "1".into(),
                skill: "hello".into(),
                args: Some(json!({ "a": 1 })),
            }))
        );
        assert_eq!(
            ClientFrame::parse(r#"{"type":"ack","eventId":"ab12"}"#),
            Ok(ClientFrame::Ack(EventRef {
                event_id: "ab12".into()
            }))
        );
        assert_eq!(
            ClientFrame::parse(r#"{"type":"ping"}"#),
            Ok(ClientFrame::Ping)
        );
    }

    #[test]
    fn a_mistake_names_the_frame_and_the_field() {
        assert!(detail(r#"{"type":"invoke","id":"1"}"#).contains("invoke: missing field `skill`"));
        assert!(
            detail(r#"{"type":"invoke","id":7,"skill":"x"}"#)
                .starts_with("invoke.id: invalid type")
        );
        assert!(
            detail(r#"{"type":"invoke","id":"1","skill":"x","args":[1]}"#)
                .starts_with("invoke.args")
        );
        assert!(detail(r#"{"type":"dance"}"#).contains("unknown frame type `dance`"));
        assert!(detail(r#"{"id":"1"}"#).contains("`type`"));
        assert!(detail("{nope").contains("line 1"));
        assert!(
            detail(r#"{"type":"subscribe","topic":"t","group":"g","from":"x"}"#)
                .starts_with("subscribe.from")
        );
    }

    #[test]
    fn an_unreadable_frame_keeps_the_id_it_named() {
        let err = ClientFrame::parse(r#"{"type":"invoke","id":"r1"}"#).unwrap_err();
        assert_eq!(err.id.as_deref(), Some("r1"));
    }
}
