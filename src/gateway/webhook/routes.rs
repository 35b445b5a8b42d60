//! Webhook routes: `webhook.routes: [{path, secret, ref, scheme, header, tolerance,
//! replay-window}]` in the
//! project's main skill (and the cascade above it). Secrets are written as `${env.NAME}`, which
//! the cascade reads from the environment; a secret written out in the skill file is refused.

use serde_json::Value;

use crate::cascade;
use crate::gateway::signature::Scheme;
use crate::skills::index::SearchIndex;

/// One webhook route.
#[derive(Clone)]
pub struct WebhookRoute {
    pub path: String,
    pub skill: String,
    pub scheme: Scheme,
    pub secret: String,
    /// Seconds a signed timestamp may be away from now.
    pub tolerance: u64,
    /// For schemes that sign no timestamp: how long the same body is taken once, whatever
    /// delivery id comes with it (zero: not at all).
    pub replay_window: std::time::Duration,
    /// The topic its deliveries queue on (reserved: only the intake emits there).
    pub topic: String,
    pub declared_in: String,
}

impl std::fmt::Debug for WebhookRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookRoute")
            .field("path", &self.path)
            .field("skill", &self.skill)
            .field("scheme", &self.scheme)
            .field("secret", &"<from the environment>")
            .finish()
    }
}

/// Default timestamp tolerance (Standard Webhooks and Stripe use five minutes).
pub const TOLERANCE: u64 = 300;
/// Default replay window for schemes without a signed timestamp.
pub const REPLAY_WINDOW: u64 = 3600;

/// Every webhook route, or every mistake (each saying where).
pub fn collect(
    index: &SearchIndex,
    project: &std::path::Path,
    taken: &dyn Fn(&str) -> bool,
) -> (Vec<WebhookRoute>, Vec<String>) {
    let mut routes = Vec::new();
    let mut errors = Vec::new();
    let Some(main) = index.main_skill(project) else {
        return (routes, errors);
    };
    let merged = match cascade::merged_for(index, main) {
        Ok(merged) => merged,
        Err(e) => {
            errors.push(e.to_string());
            return (routes, errors);
        }
    };
    let Some(list) = merged.metadata.get("webhook").and_then(|w| w.get("routes")) else {
        return (routes, errors);
    };
    let where_ = format!("{}: metadata.webhook.routes", main.location());
    let Value::Array(items) = list else {
        errors.push(format!(
            "{where_}: must be a list of {{path, secret, ref, scheme}}"
        ));
        return (routes, errors);
    };
    // As written in the main skill (the cascade has already put the environment's values in).
    let written = main
        .metadata
        .get("webhook")
        .and_then(|w| w.get("routes"))
        .and_then(Value::as_array);
    for (i, item) in items.iter().enumerate() {
        let at = format!("{where_}[{i}]");
        let written_secret = written
            .and_then(|w| w.get(i))
            .and_then(|r| r.get("secret"))
            .and_then(Value::as_str);
        match parse(item, written_secret, &at, index) {
            Ok(route) => {
                if taken(&route.path) {
                    errors.push(format!("{at}.path: `{}` is already served", route.path));
                } else if routes.iter().any(|r: &WebhookRoute| r.path == route.path) {
                    errors.push(format!("{at}.path: `{}` is declared twice", route.path));
                } else {
                    routes.push(route);
                }
            }
            Err(mut more) => errors.append(&mut more),
        }
    }
    (routes, errors)
}

fn parse(
    item: &Value,
    written_secret: Option<&str>,
    at: &str,
    index: &SearchIndex,
) -> Result<WebhookRoute, Vec<String>> {
    let mut errors = Vec::new();
    let Value::Object(map) = item else {
        return Err(vec![format!(
            "{at}: must be an object {{path, secret, ref, scheme}}"
        )]);
    };
    let get = |k: &str| map.get(k).and_then(Value::as_str);
    let path = match get("path") {
        Some(p) if p.starts_with('/') && !p.contains(['{', '}', ':', '*', '?', '[', ']']) => {
            p.to_string()
        }
        Some(p) => {
            errors.push(format!(
                "{at}.path: `{p}` must be a plain path starting with `/`"
            ));
            String::new()
        }
        None => {
            errors.push(format!("{at}.path: missing"));
            String::new()
        }
    };
    let skill = match get("ref") {
        Some(s) if index.get(s).is_some() => s.to_string(),
        Some(s) => {
            let hint = index
                .closest(s)
                .into_iter()
                .next()
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            errors.push(format!("{at}.ref: no skill named `{s}`{hint}"));
            String::new()
        }
        None => {
            errors.push(format!("{at}.ref: missing (the skill to run)"));
            String::new()
        }
    };
    let scheme = match get("scheme").unwrap_or("standard") {
        "standard" => Scheme::Standard,
        "github" => Scheme::Github,
        "stripe" => Scheme::Stripe,
        "slack" => Scheme::Slack,
        "hmac" => Scheme::Hmac {
            header: get("header").unwrap_or("x-signature").to_ascii_lowercase(),
        },
        other => {
            errors.push(format!(
                "{at}.scheme: `{other}` is not one of standard, github, stripe, slack, hmac"
            ));
            Scheme::Standard
        }
    };
    let reference = written_secret.and_then(env_reference);
    let secret = match (written_secret, reference, get("secret")) {
        (Some(_), None, _) => {
            errors.push(format!(
                "{at}.secret: write it as a reference such as `${{env.WEBHOOK_SECRET}}`; a secret in a skill file would be committed with it"
            ));
            String::new()
        }
        (_, Some(name), Some("") | None) => {
            errors.push(format!(
                "{at}.secret: the environment variable `{name}` (in `${{env.{name}}}`) is not set"
            ));
            String::new()
        }
        (_, _, Some(secret)) if !secret.is_empty() => secret.to_string(),
        _ => {
            errors.push(format!("{at}.secret: missing"));
            String::new()
        }
    };
    let tolerance = match map.get("tolerance") {
        None => TOLERANCE,
        Some(v) => v.as_u64().unwrap_or_else(|| {
            errors.push(format!("{at}.tolerance: must be a number of seconds"));
            TOLERANCE
        }),
    };
    let replay_window = match map.get("replay-window") {
        None => REPLAY_WINDOW,
        Some(v) => v.as_u64().unwrap_or_else(|| {
            errors.push(format!("{at}.replay-window: must be a number of seconds"));
            REPLAY_WINDOW
        }),
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(WebhookRoute {
        replay_window: std::time::Duration::from_secs(replay_window),
        topic: topic_for(&path),
        path,
        skill,
        scheme,
        secret,
        tolerance,
        declared_in: at.to_string(),
    })
}

/// `NAME` of `${env.NAME}`.
fn env_reference(value: &str) -> Option<&str> {
    let name = value.trim().strip_prefix("${env.")?.strip_suffix('}')?;
    (!name.is_empty()).then_some(name)
}

/// The queue topic of a route: `gateway-webhook` and the path's segments
/// (`/hooks/GitHub` → `gateway-webhook.hooks.github`).
pub fn topic_for(path: &str) -> String {
    let mut topic = String::from("gateway-webhook");
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        topic.push('.');
        topic.extend(segment.chars().map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        }));
    }
    topic
}
