//! The event skills (`event-emit`, `event-subscribe`, `event-unsubscribe`, `event-wait`,
//! `event-ack`) and the `event` metadata middleware.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::events::{
    Bus, DEFAULT_QUEUE, Handler, SYSTEM_EMIT_PATH, SystemEmit, event_from_args, is_reserved_topic,
};
use crate::kernel::authority::{Authority, Level, ToolClass, check_stored};
use crate::skills::native::{native, pass};
use crate::skills::tool::Tool;

pub fn tools() -> Vec<Tool> {
    vec![
        emit(),
        // Subscriptions outlive the request that made them: control-plane tools.
        subscribe().class(ToolClass::ControlPlane),
        unsubscribe().class(ToolClass::ControlPlane),
        wait(),
        ack(),
        middleware(),
    ]
}

fn bus(ctx: &Context) -> Result<Arc<Bus>> {
    ctx.kernel()
        .extension::<Bus>()
        .cloned()
        .ok_or_else(|| SkillError::internal("the kernel has no event bus"))
}

fn bad(message: impl Into<String>) -> SkillError {
    SkillError::new(ErrorKind::InvalidArgs, message)
}

fn string<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// Refuses a topic the authority's principal may not read or emit on (below project level:
/// project code serving a caller keeps the project's topics).
fn check_topic(authority: &Authority, topic: &str) -> Result<()> {
    if authority.level == Level::Project || authority.principal.may_use_topic(topic) {
        return Ok(());
    }
    let why = if is_reserved_topic(topic) {
        "reserved for skillgate itself (reading it needs a key with `admin`)"
    } else {
        "not among its `topics`"
    };
    Err(SkillError::new(
        ErrorKind::Denied,
        format!(
            "`{}` may not use the topic `{topic}`: {why}",
            authority.principal.id()
        ),
    )
    .with_data(json!({ "rule": "topic", "topic": topic })))
}

/// What of a reserved topic (`gateway-*` workers' queues, dead letters) only the project
/// touches, `admin` included: who consumes it (a worker's queue dropped would lose deliveries
/// that were already answered 2xx), and its queues (a delivery taken there was answered 2xx and
/// would never run; an admin follows reserved topics instead, `GET /events/{topic}`).
#[derive(Clone, Copy)]
enum Reserved {
    Subscriptions,
    Queues,
}

/// Refuses touching `what` of a reserved topic below project level.
fn check_reserved(authority: &Authority, topic: &str, what: Reserved) -> Result<()> {
    if authority.level == Level::Project || !is_reserved_topic(topic) {
        return Ok(());
    }
    let message = match what {
        Reserved::Subscriptions => {
            format!("the subscriptions of the reserved topic `{topic}` are skillgate's own")
        }
        Reserved::Queues => format!(
            "the queues of the reserved topic `{topic}` are skillgate's own; follow it instead"
        ),
    };
    Err(SkillError::new(ErrorKind::Denied, message)
        .with_data(json!({ "rule": "topic", "topic": topic })))
}

/// The queue `args.queue` (default `default`) names for the invoking authority: below project
/// level, the principal's own queue of that name (see `events::owned_queue`).
fn queue_of(ctx: &Context, args: &Value) -> String {
    let queue = string(args, "queue").unwrap_or(DEFAULT_QUEUE);
    let authority = ctx.authority();
    if authority.level == Level::Project {
        queue.to_string()
    } else {
        crate::events::owned_queue(&authority.principal, queue)
    }
}

/// The topic and queue `tool` (`event-wait`, `event-ack`) takes from, once the caller may.
fn queue_taken<'a>(ctx: &Context, args: &'a Value, tool: &str) -> Result<(&'a str, String)> {
    let topic = string(args, "topic").ok_or_else(|| bad(format!("{tool} needs a `topic`")))?;
    check_topic(ctx.authority(), topic)?;
    check_reserved(ctx.authority(), topic, Reserved::Queues)?;
    Ok((topic, queue_of(ctx, args)))
}

/// A skill name, as `ref` takes it.
const SKILL_NAME: &str =
    r#"{ type: string, pattern: "^[a-z0-9][a-z0-9-]*$", description: "A skill name." }"#;
/// A queue name: the bus's `NAME_PATTERN`, filled in by [`event_tool`].
const QUEUE_NAME: &str = "{ type: string, pattern: NAME_PATTERN }";

/// An event skill: its params an object with a required `topic` (a name the bus takes) and
/// `properties` (name, YAML schema, where `NAME_PATTERN` stands for the bus's pattern of
/// names), then `schema`, more of the params schema (YAML lines indented by four).
fn event_tool<F, Fut>(
    name: &str,
    description: &str,
    properties: &[(&str, &str)],
    schema: &str,
    body: F,
) -> Tool
where
    F: Fn(Context, Arc<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Value>>> + Send + 'static,
{
    let pattern = Value::from(crate::events::NAME_PATTERN).to_string();
    let mut yaml = format!(
        "name: {name}\ndescription: {}\nmetadata:\n  tags: [events]\n  params:\n    type: object\n    properties:\n      topic: {{ type: string, pattern: {pattern}, description: \"1 to 200 lowercase letters, digits, -, _, . or :, starting with a letter or digit.\" }}\n",
        Value::from(description),
    );
    for (key, property) in properties {
        let property = property.replace("NAME_PATTERN", &pattern);
        yaml.push_str(&format!("      {key}: {property}\n"));
    }
    yaml.push_str("    required: [topic]\n");
    yaml.push_str(schema);
    native(&yaml, body)
}

fn emit() -> Tool {
    event_tool(
        "event-emit",
        "Publish an event to a topic; returns the envelope (durable once this returns).",
        &[
            ("type", "{ type: string }"),
            ("source", "{ type: string }"),
            ("data", "{}"),
        ],
        "",
        |ctx, args| async move {
            let source = ctx.parent().map_or_else(
                || ctx.tool_name().to_string(),
                |p| p.tool_name().to_string(),
            );
            let mut event = event_from_args(&args, &source, &ctx.root_id())?;
            let authority = ctx.authority();
            if !is_reserved_topic(&event.topic) {
                check_topic(authority, &event.topic)?;
            }
            // Set here, from the run's authority: what the emitter says is `source`.
            event.principal = Some(authority.principal.id().to_string());
            if is_reserved_topic(&event.topic)
                && ctx.extension::<SystemEmit>(SYSTEM_EMIT_PATH).is_none()
            {
                return Err(SkillError::new(
                    ErrorKind::Denied,
                    format!(
                        "the topic `{}` is reserved for skillgate itself (`shutdown`, `gateway-*`, `agent-*`, `*.dead`)",
                        event.topic
                    ),
                ));
            }
            event.depth = Some(ctx.depth());
            event.budget = Some(ctx.kernel().budgets().id_of(ctx.budget()));
            bus(&ctx)?.emit(&event).await?;
            Ok(Some(event.to_json()))
        },
    )
}

fn subscribe() -> Tool {
    event_tool(
        "event-subscribe",
        "Subscribe to a topic: `ref` invokes a skill with each event; without it, a queue for event-wait. Idempotent.",
        &[
            ("ref", SKILL_NAME),
            ("args", "{ type: object }"),
            ("queue", QUEUE_NAME),
            ("replay", "{ type: boolean }"),
        ],
        "",
        |ctx, args| async move {
            let topic =
                string(&args, "topic").ok_or_else(|| bad("event-subscribe needs a `topic`"))?;
            check_reserved(ctx.authority(), topic, Reserved::Subscriptions)?;
            let replay = args.get("replay").and_then(Value::as_bool).unwrap_or(false);
            let bus = bus(&ctx)?;
            match string(&args, "ref") {
                Some(reference) => {
                    // Handlers are skills by name: a path would load a file the caller chose.
                    if !crate::skills::frontmatter::is_tool_name(reference) {
                        return Err(bad(format!(
                            "event-subscribe `ref` must be a skill name ([a-z0-9-]), got `{reference}`"
                        )));
                    }
                    // The handler runs later as its principal's call: what it names and the
                    // args it keeps are checked against that principal now.
                    let principal = ctx.authority().principal.clone();
                    let runs_as = Authority::caller(principal.clone());
                    runs_as.reach(&ctx.index(), reference)?;
                    check_topic(&runs_as, topic)?;
                    if let Some(stored) = args.get("args") {
                        check_stored(stored)?;
                    }
                    let created = bus
                        .subscribe_kept(
                            ctx.kernel(),
                            Handler {
                                topic: topic.to_string(),
                                reference: reference.to_string(),
                                args: args.get("args").cloned(),
                                principal,
                                replay,
                            },
                        )
                        .await?;
                    Ok(Some(
                        json!({ "topic": topic, "ref": reference, "created": created }),
                    ))
                }
                None => {
                    check_topic(ctx.authority(), topic)?;
                    let queue = queue_of(&ctx, &args);
                    let created = bus.subscribe_queue(topic, &queue, replay).await?;
                    Ok(Some(
                        json!({ "topic": topic, "queue": queue, "created": created }),
                    ))
                }
            }
        },
    )
}

fn unsubscribe() -> Tool {
    event_tool(
        "event-unsubscribe",
        "Remove a skill handler (`ref`) from a topic, a named `queue`, or every handler of the topic.",
        &[("ref", SKILL_NAME), ("queue", QUEUE_NAME)],
        "",
        |ctx, args| async move {
            let topic =
                string(&args, "topic").ok_or_else(|| bad("event-unsubscribe needs a `topic`"))?;
            check_reserved(ctx.authority(), topic, Reserved::Subscriptions)?;
            let bus = bus(&ctx)?;
            let principal = &ctx.authority().principal;
            let removed = match string(&args, "queue") {
                Some(_) => usize::from(bus.drop_queue(topic, &queue_of(&ctx, &args)).await?),
                // Handlers are removed by whom they run for: a principal's own, or any with
                // `admin` (the project's included).
                None => {
                    bus.unsubscribe_for(topic, string(&args, "ref"), principal)
                        .await?
                }
            };
            Ok(Some(json!({ "removed": removed })))
        },
    )
}

fn wait() -> Tool {
    event_tool(
        "event-wait",
        "Wait for events on a topic's queue: returns at once with what is there, else the first to arrive, or [] after `timeout` ms.",
        &[
            ("queue", QUEUE_NAME),
            (
                "timeout",
                r#"{ type: number, minimum: 0, description: "Milliseconds to wait when the queue is empty (default 30000)." }"#,
            ),
            ("max", "{ type: integer, minimum: 1 }"),
            ("ack", "{ type: boolean }"),
        ],
        "",
        |ctx, args| async move {
            let (topic, queue) = queue_taken(&ctx, &args, "event-wait")?;
            let queue = queue.as_str();
            let timeout = match args.get("timeout") {
                None | Some(Value::Null) => 30_000.0,
                Some(v) => v.as_f64().ok_or_else(|| {
                    bad(format!(
                        "event-wait `timeout` must be milliseconds, got {v}"
                    ))
                })?,
            };
            if timeout < 0.0 || !timeout.is_finite() {
                return Err(bad(format!(
                    "event-wait `timeout` must be 0 or more milliseconds, got {timeout}"
                )));
            }
            let max = args.get("max").and_then(Value::as_u64).unwrap_or(100) as usize;
            let ack = args.get("ack").and_then(Value::as_bool).unwrap_or(true);
            let bus = bus(&ctx)?;
            let wait = bus.wait(
                topic,
                queue,
                ctx.bounded_wait(Duration::from_millis(timeout as u64)),
                max,
                ack,
            );
            let got = tokio::select! {
                got = wait => got?,
                () = ctx.cancelled() => return Err(ctx.abort_error().unwrap_or_else(|| SkillError::new(ErrorKind::Aborted, "aborted"))),
            };
            let events: Vec<Value> = got
                .into_iter()
                .map(|d| {
                    let mut e = d.event.to_json();
                    if let Value::Object(map) = &mut e {
                        map.insert("attempts".into(), json!(d.attempts));
                        map.insert("receipt".into(), json!(d.receipt));
                    }
                    e
                })
                .collect();
            Ok(Some(Value::Array(events)))
        },
    )
}

fn ack() -> Tool {
    event_tool(
        "event-ack",
        "Acknowledge events taken with `ack: false` (removes them), or `nack: true` to return them to the front of the queue. Name them by `receipts` (from event-wait: exact) or by event `ids`. Returns how many were settled and the `unknown` ones the queue no longer holds (settled already).",
        &[
            ("queue", QUEUE_NAME),
            (
                "receipts",
                "{ type: array, minItems: 1, items: { type: integer, minimum: 0 } }",
            ),
            ("receipt", "{ type: integer, minimum: 0 }"),
            (
                "ids",
                "{ type: array, minItems: 1, items: { type: string } }",
            ),
            ("id", "{ type: string }"),
            ("nack", "{ type: boolean }"),
        ],
        r#"    anyOf:
      - { required: [receipts] }
      - { required: [receipt] }
      - { required: [ids] }
      - { required: [id] }
"#,
        |ctx, args| async move {
            let (topic, queue) = queue_taken(&ctx, &args, "event-ack")?;
            let queue = queue.as_str();
            let mut ids: Vec<String> = args
                .get("ids")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(id) = string(&args, "id") {
                ids.push(id.to_string());
            }
            let mut receipts: Vec<u64> = args
                .get("receipts")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            if let Some(receipt) = args.get("receipt").and_then(Value::as_u64) {
                receipts.push(receipt);
            }
            if ids.is_empty() && receipts.is_empty() {
                return Err(bad(
                    "event-ack needs `receipts` (or `receipt`) or `ids` (or `id`)",
                ));
            }
            let nack = args.get("nack").and_then(Value::as_bool).unwrap_or(false);
            let bus = bus(&ctx)?;
            // Settling is idempotent, as in SQS or Pub/Sub: a receipt or id the queue no longer
            // holds (acked already, by a retry of this very call, say) is reported, not an error.
            let mut unknown = Vec::new();
            if !receipts.is_empty() {
                unknown.extend(not_held(bus.ack(topic, queue, &receipts, nack).await)?);
            }
            if !ids.is_empty() {
                unknown.extend(not_held(bus.ack_ids(topic, queue, &ids, nack).await)?);
            }
            let settled = ids.len() + receipts.len() - unknown.len();
            Ok(Some(json!({
                if nack { "nacked" } else { "acked" }: settled,
                "unknown": unknown,
            })))
        },
    )
}

/// The receipts or ids an ack found no entry for (`data.unknown` of its error), or the error
/// when it failed for another reason.
fn not_held(outcome: Result<()>) -> Result<Vec<Value>> {
    match outcome {
        Ok(()) => Ok(Vec::new()),
        Err(err) => match err.data().and_then(|d| d.get("unknown")) {
            Some(Value::Array(unknown)) => Ok(unknown.clone()),
            _ => Err(err),
        },
    }
}

fn middleware() -> Tool {
    native(
        r#"
name: event
description: "Routes topics to skills: `event: { routes: [{ topic, ref }] }`, or `route: topic` for the skill itself."
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, meta-metadata, events]
"#,
        |ctx, args| async move {
            let target = ctx.ctx_target()?;
            let bus = bus(&ctx)?;
            let routes = crate::events::routes::parse(&args, target.tool_name())
                .map_err(|e| target.fail(bad(e)))?;
            for route in routes {
                target
                    .index()
                    .find(&route.reference)
                    .map_err(|e| target.fail(e))?;
                bus.subscribe_handler(
                    ctx.kernel(),
                    &route.topic,
                    &route.reference,
                    route.args,
                    false,
                )
                .await
                .map_err(|e| target.fail(e))?;
            }
            pass(&target).await
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event skill's `topic` and `queue` params declare exactly the names the bus takes
    /// ([`crate::events::NAME_PATTERN`]), so a client that follows the schema is never refused
    /// for the name's form.
    #[test]
    fn the_declared_topic_and_queue_forms_are_what_the_bus_accepts() {
        let mut checked = 0;
        for tool in tools() {
            let Some(properties) = tool.params().and_then(|p| p.get("properties")) else {
                continue;
            };
            for field in ["topic", "queue"] {
                if let Some(schema) = properties.get(field) {
                    assert_eq!(
                        schema["pattern"],
                        crate::events::NAME_PATTERN,
                        "{}: {field}",
                        tool.name
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 9, "five topics and four queues");
    }
}
