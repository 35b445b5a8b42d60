//! Event routes: reading `event.routes` / `event.route` from metadata (for the `event`
//! middleware and for `serve`), and subscribing every route the project declares when `serve`
//! starts or reloads, so an event-driven skill works before anything has invoked it.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::cascade;
use crate::events::{KernelBus, check_name};
use crate::kernel::Kernel;
use crate::skills::index::SearchIndex;

/// One route: events on `topic` invoke the skill `reference` (with `args` merged in).
#[derive(Debug, Clone, PartialEq)]
pub struct EventRoute {
    pub topic: String,
    pub reference: String,
    pub args: Option<Value>,
}

/// The routes of one `event` section as the middleware receives it: `routes: [{topic, ref,
/// args}]`, and `route: topic` or `route: {topic, args}` naming `owner` itself. The error says
/// which field is wrong; the caller adds where it was declared.
pub fn parse(section: &Value, owner: &str) -> Result<Vec<EventRoute>, String> {
    let mut routes = Vec::new();
    match section.get("routes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let field = |key: &str| item.get(key).and_then(Value::as_str);
                let (Some(topic), Some(reference)) = (field("topic"), field("ref")) else {
                    return Err(format!(
                        "`event.routes[{i}]` needs `topic` and `ref`: {item}"
                    ));
                };
                routes.push(route(
                    topic,
                    reference,
                    item.get("args"),
                    &format!("event.routes[{i}]"),
                )?);
            }
        }
        Some(_) => return Err("`event.routes` must be a list of { topic, ref }".into()),
    }
    match section.get("route") {
        None | Some(Value::Null) => {}
        Some(Value::String(topic)) => routes.push(route(topic, owner, None, "event.route")?),
        Some(spec) => match spec.get("topic").and_then(Value::as_str) {
            Some(topic) => routes.push(route(topic, owner, spec.get("args"), "event.route")?),
            None => {
                return Err(format!(
                    "`event.route` must be a topic or {{ topic }}: {spec}"
                ));
            }
        },
    }
    Ok(routes)
}

fn route(
    topic: &str,
    reference: &str,
    args: Option<&Value>,
    field: &str,
) -> Result<EventRoute, String> {
    check_name("topic", topic).map_err(|e| format!("`{field}.topic`: {}", e.message()))?;
    if !crate::skills::frontmatter::is_tool_name(reference) {
        return Err(format!(
            "`{field}.ref` must be a skill name ([a-z0-9-]), got `{reference}`"
        ));
    }
    Ok(EventRoute {
        topic: topic.into(),
        reference: reference.into(),
        args: args.filter(|a| !a.is_null()).cloned(),
    })
}

/// Every route the skills of `index` declare, each once, and every mistake (with the file that
/// declares it). A skill's `routes` are read from its merged metadata (so the environment's
/// values are in), its `route` only from its own (a folder's `route` names the folder skill).
pub fn collect(index: &SearchIndex) -> (Vec<EventRoute>, Vec<String>) {
    let mut routes = Vec::new();
    let mut seen = BTreeSet::new();
    let mut errors = Vec::new();
    for tool in index.tools() {
        let Some(own) = tool.metadata.get("event").filter(|e| !e.is_null()) else {
            continue;
        };
        let at = format!("{}: metadata.event", tool.location());
        let merged = match cascade::merged_for(index, tool) {
            Ok(merged) => merged,
            Err(e) => {
                errors.push(format!("{at}: {e}"));
                continue;
            }
        };
        let mut section = merged.metadata.get("event").cloned().unwrap_or(Value::Null);
        if own.get("route").is_none()
            && let Value::Object(map) = &mut section
        {
            map.remove("route");
        }
        match parse(&section, &tool.name) {
            Err(e) => errors.push(format!("{at}: {e}")),
            Ok(found) => {
                for route in found {
                    if index.get(&route.reference).is_none() {
                        let hint = index
                            .closest(&route.reference)
                            .into_iter()
                            .next()
                            .map(|s| format!(" (did you mean `{s}`?)"))
                            .unwrap_or_default();
                        errors.push(format!(
                            "{at}: `{}` routes to `{}`, which is not a skill{hint}",
                            route.topic, route.reference
                        ));
                    } else if seen.insert((route.topic.clone(), route.reference.clone())) {
                        routes.push(route);
                    }
                }
            }
        }
    }
    (routes, errors)
}

/// Subscribes every route the current skills declare (idempotent: a route already served keeps
/// its worker), and removes the handler of every route an edit took away since the last call
/// (its worker stops and its queue goes: nothing would ever handle what waited there). Returns
/// how many workers were started; mistakes are logged and skipped (`serve` refuses to start
/// with them, a reload keeps going).
pub async fn subscribe_declared(kernel: &Kernel) -> usize {
    let index = kernel.registry().current();
    let (routes, errors) = collect(&index);
    for error in errors {
        tracing::error!("event route not subscribed: {error}");
    }
    let bus = kernel.bus();
    let declared = routes
        .iter()
        .map(|r| (r.topic.clone(), r.reference.clone()))
        .collect();
    for (topic, reference) in bus.replace_declared(declared) {
        match bus.unsubscribe(&topic, Some(&reference)).await {
            Ok(_) => tracing::info!(%topic, skill = %reference, "event route removed"),
            Err(e) => tracing::error!(%topic, skill = %reference, "event route not removed: {e}"),
        }
    }
    let mut started = 0;
    for route in routes {
        match bus
            .subscribe_handler(kernel, &route.topic, &route.reference, route.args, false)
            .await
        {
            Ok(true) => started += 1,
            Ok(false) => {}
            Err(e) => tracing::error!(
                topic = %route.topic,
                skill = %route.reference,
                "event route not subscribed: {e}"
            ),
        }
    }
    started
}
