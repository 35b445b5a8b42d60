//! Slack settings: [`SlackSettings`] as written (the `slack:` section of skillgate.yaml, or
//! `metadata.slack` in the project's main skill; the file wins key by key), with Slack's
//! conventional variables as defaults (`SLACK_BOT_TOKEN`, `SLACK_SIGNING_SECRET`,
//! `SLACK_APP_TOKEN`, `SLACK_API_URL`), resolved into the [`SlackConfig`] the transport runs.

use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use crate::config::ConfigErrors;
use crate::config::routes;
pub use crate::config::routes::Target;
use crate::config::values::{Seconds, Secret};

/// Slack's Web API.
pub const DEFAULT_API_URL: &str = "https://slack.com/api/";
/// Where Slack posts Events API requests.
pub const DEFAULT_EVENTS_PATH: &str = "/slack/events";

/// The keys of the `slack` section that hold secrets: written as `${env.NAME}` references, never
/// as text in a file.
pub const SECRETS: [Secret; 3] = [
    Secret {
        key: "bot-token",
        url: false,
        example: "SLACK_BOT_TOKEN",
    },
    Secret {
        key: "signing-secret",
        url: false,
        example: "SLACK_SIGNING_SECRET",
    },
    Secret {
        key: "app-token",
        url: false,
        example: "SLACK_APP_TOKEN",
    },
];

/// The `slack` settings as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SlackSettings {
    /// `xoxb-` token for the Web API (write `${env.NAME}`).
    pub bot_token: Option<String>,
    /// Signs Events API requests (write `${env.NAME}`).
    pub signing_secret: Option<String>,
    /// `xapp-` token for Socket Mode (write `${env.NAME}`).
    pub app_token: Option<String>,
    pub api_url: Option<String>,
    pub events_path: Option<String>,
    /// Use Socket Mode when an app token is there [default: true].
    pub socket_mode: Option<bool>,
    pub routes: Option<Vec<RouteSettings>>,
    /// The skill for messages no route takes.
    pub default: Option<String>,
    /// Least time between two messages posted to one channel [default: 1 s].
    pub post_interval: Option<Seconds>,
    /// Least time between two updates of a streamed answer [default: 1 s].
    pub update_interval: Option<Seconds>,
}

/// One route as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RouteSettings {
    #[serde(rename = "ref")]
    pub skill: Option<String>,
    /// A channel id (`C0123…`): the route only takes messages there.
    pub channel: Option<String>,
    /// A regular expression the text (bot mention removed) must match; its named groups
    /// become args.
    #[serde(rename = "match")]
    pub pattern: Option<String>,
    /// Take plain channel messages in `channel` too, not only mentions and DMs.
    pub messages: Option<bool>,
    /// The first word of the text names the skill; the rest is its args.
    pub command: Option<bool>,
    /// With `command`: the skills it may run (globs) [default: every skill].
    pub skills: Option<Vec<String>>,
}

impl SlackSettings {
    /// Every skill the routes name, with where, to check they exist.
    pub fn named_skills(&self) -> Vec<(String, String)> {
        let routes = self.routes.iter().flatten();
        routes::named_skills(
            "slack",
            routes.map(|r| r.skill.as_ref()),
            self.default.as_ref(),
        )
    }

    /// These settings, with `other`'s where these have none.
    pub fn or(self, other: SlackSettings) -> SlackSettings {
        SlackSettings {
            bot_token: self.bot_token.or(other.bot_token),
            signing_secret: self.signing_secret.or(other.signing_secret),
            app_token: self.app_token.or(other.app_token),
            api_url: self.api_url.or(other.api_url),
            events_path: self.events_path.or(other.events_path),
            socket_mode: self.socket_mode.or(other.socket_mode),
            routes: self.routes.or(other.routes),
            default: self.default.or(other.default),
            post_interval: self.post_interval.or(other.post_interval),
            update_interval: self.update_interval.or(other.update_interval),
        }
    }

    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.routes.is_none() && self.default.is_none()
    }
}

/// A resolved route.
#[derive(Debug, Clone)]
pub struct Route {
    pub target: Target,
    pub channel: Option<String>,
    pub pattern: Option<Regex>,
    pub messages: bool,
}

/// What the Slack transport runs with.
#[derive(Clone)]
pub struct SlackConfig {
    pub bot_token: String,
    pub signing_secret: Option<String>,
    pub app_token: Option<String>,
    /// Ends with `/`.
    pub api_url: String,
    pub events_path: String,
    pub routes: Vec<Route>,
    pub default: Option<String>,
    pub post_interval: Duration,
    pub update_interval: Duration,
}

impl std::fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackConfig")
            .field("api_url", &self.api_url)
            .field("events_api", &self.signing_secret.is_some())
            .field("socket_mode", &self.app_token.is_some())
            .field("routes", &self.routes.len())
            .finish_non_exhaustive()
    }
}

impl SlackConfig {
    /// Resolves `settings` (already merged from the file and the main skill) over the
    /// environment's defaults (`env`). `None` when Slack is not configured (no routes and no
    /// default); every mistake is returned, each under `slack.<key>`.
    pub fn resolve(
        settings: SlackSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<SlackConfig>, ConfigErrors> {
        if settings.is_empty() {
            return Ok(None);
        }
        let mut errors = ConfigErrors::default();
        let present = |value: Option<String>| value.filter(|s| !s.is_empty());
        let bot_token = present(settings.bot_token.or_else(|| env("SLACK_BOT_TOKEN")));
        let signing_secret = present(
            settings
                .signing_secret
                .or_else(|| env("SLACK_SIGNING_SECRET")),
        );
        let app_token = match settings.socket_mode {
            Some(false) => None,
            _ => present(settings.app_token.or_else(|| env("SLACK_APP_TOKEN"))),
        };
        if bot_token.is_none() {
            errors.at(
                "slack.bot-token",
                "missing (set `SLACK_BOT_TOKEN`, or `bot-token: ${env.NAME}`)",
            );
        }
        if signing_secret.is_none() && app_token.is_none() {
            errors.at(
                "slack",
                "Slack cannot reach skillgate: give `signing-secret` (Events API, `SLACK_SIGNING_SECRET`) or `app-token` (Socket Mode, `SLACK_APP_TOKEN`)",
            );
        }
        let mut api_url = settings
            .api_url
            .or_else(|| env("SLACK_API_URL"))
            .unwrap_or_else(|| DEFAULT_API_URL.to_string());
        if !(api_url.starts_with("https://") || api_url.starts_with("http://")) {
            errors.at(
                "slack.api-url",
                format!("`{api_url}` must be an http:// or https:// URL"),
            );
        }
        if !api_url.ends_with('/') {
            api_url.push('/');
        }
        let events_path = settings
            .events_path
            .unwrap_or_else(|| DEFAULT_EVENTS_PATH.to_string());
        if !events_path.starts_with('/') || events_path.contains(['{', '}', '*', ':']) {
            errors.at(
                "slack.events-path",
                format!("`{events_path}` must be a plain path starting with `/`"),
            );
        }
        let routes: Vec<Route> = settings
            .routes
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, route)| resolve_route(route, &format!("slack.routes[{i}]"), &mut errors))
            .collect();
        let interval = |value: Option<Seconds>| value.map_or(Duration::from_secs(1), |s| s.0);
        errors.or_ok(Some(SlackConfig {
            bot_token: bot_token.unwrap_or_default(),
            signing_secret,
            app_token,
            api_url,
            events_path,
            routes,
            default: settings.default,
            post_interval: interval(settings.post_interval),
            update_interval: interval(settings.update_interval),
        }))
    }
}

fn resolve_route(route: RouteSettings, at: &str, errors: &mut ConfigErrors) -> Route {
    let target = routes::target(
        route.skill,
        route.command,
        route.skills.as_deref(),
        at,
        errors,
    );
    let pattern = routes::pattern(route.pattern.as_deref(), format!("{at}.match"), errors);
    let messages = route.messages.unwrap_or(false);
    if messages && route.channel.is_none() {
        errors.at(
            format!("{at}.messages"),
            "plain channel messages need a `channel` to listen in",
        );
    }
    Route {
        target,
        channel: route.channel,
        pattern,
        messages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SLACK_BOT_TOKEN" => Some("xoxb-env".into()),
            "SLACK_SIGNING_SECRET" => Some("secret-env".into()),
            _ => None,
        }
    }

    fn parse(yaml: &str) -> SlackSettings {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn tokens_default_to_slacks_conventional_variables() {
        let config = SlackConfig::resolve(parse("default: helper\n"), &env)
            .unwrap()
            .unwrap();
        assert_eq!(config.bot_token, "xoxb-env");
        assert_eq!(config.signing_secret.as_deref(), Some("secret-env"));
        assert_eq!(config.app_token, None);
        assert_eq!(config.api_url, DEFAULT_API_URL);
        assert_eq!(config.events_path, DEFAULT_EVENTS_PATH);
    }

    #[test]
    fn no_routes_and_no_default_is_no_slack() {
        assert!(
            SlackConfig::resolve(SlackSettings::default(), &env)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn every_mistake_is_named_by_its_key() {
        let errors = SlackConfig::resolve(
            parse("api-url: ftp://x\nroutes:\n  - { channel: C1 }\n  - { ref: a, match: '(' }\n  - { ref: b, messages: true }\n"),
            &|_| None,
        )
        .unwrap_err();
        let all = errors.to_string();
        for expected in [
            "slack.bot-token: missing",
            "signing-secret",
            "slack.api-url",
            "slack.routes[0].ref: missing",
            "slack.routes[1].match",
            "slack.routes[2].messages",
        ] {
            assert!(all.contains(expected), "`{expected}` in:\n{all}");
        }
    }

    #[test]
    fn a_command_route_without_skills_is_refused_naming_the_key() {
        let errors = SlackConfig::resolve(parse("routes:\n  - { command: true }\n"), &env)
            .unwrap_err()
            .to_string();
        assert!(errors.contains("slack.routes[0].skills"), "{errors}");
        let ok = SlackConfig::resolve(
            parse("routes:\n  - { command: true, skills: ['*'] }\n"),
            &env,
        );
        assert!(ok.is_ok());
    }
}
