//! Putting the Slack settings together: the config file's `slack:` section over
//! `metadata.slack` of the project's main skill, over Slack's variables; tokens written out in
//! the skill file refused (write `${env.NAME}`); the skills the routes name checked. Then, when
//! the server starts, the door made with its queue.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::cascade;
use crate::config::ConfigErrors;
use crate::config::env::Vars;
use crate::config::routes::check_skills;
use crate::config::slack::{SECRETS, SlackConfig, SlackSettings};
use crate::gateway::Gateway;
use crate::gateway::slack::{Slack, worker};
use crate::skills::index::SearchIndex;

/// The resolved settings, `None` when the project has no Slack routes: `file` over the main
/// skill's `metadata.slack` over Slack's variables, the skills the routes name checked; every
/// mistake at once.
pub fn resolve(
    index: &SearchIndex,
    project: &Path,
    file: SlackSettings,
    vars: &Vars,
) -> Result<Option<SlackConfig>, ConfigErrors> {
    let settings = file.or(from_main_skill(index, project)?);
    let mut errors = ConfigErrors::default();
    check_skills(settings.named_skills(), index, &mut errors);
    match SlackConfig::resolve(settings, &|name| vars.get(name)) {
        Ok(config) => errors.or_ok(config),
        Err(more) => {
            errors.extend(more);
            Err(errors)
        }
    }
}

/// The settings of `next` that differ from `running` and only a restart applies (the tokens,
/// the API URL, the Events API path and the paces the door was made with), named; `next`
/// takes `running`'s values of them.
pub fn keep_restart_settings(running: &SlackConfig, next: &mut SlackConfig) -> Vec<&'static str> {
    let mut changed = Vec::new();
    crate::gateway::restart::keep_running!(running, next, changed;
        bot_token => "slack.bot-token",
        signing_secret => "slack.signing-secret",
        app_token => "slack.app-token",
        api_url => "slack.api-url",
        events_path => "slack.events-path",
        post_interval => "slack.post-interval",
        update_interval => "slack.update-interval",
    );
    changed
}

/// The Slack door for `config`, its event queue made.
pub async fn open(gateway: &Gateway, config: SlackConfig) -> Result<Arc<Slack>, String> {
    crate::gateway::queue::prepare(gateway, &worker::lane())
        .await
        .map_err(|e| format!("slack: the event queue could not be made: {e}"))?;
    Ok(Arc::new(Slack::new(gateway, config)))
}

/// `metadata.slack` of the main skill (through its cascade, so `${env.NAME}` is filled in).
fn from_main_skill(index: &SearchIndex, project: &Path) -> Result<SlackSettings, ConfigErrors> {
    let Some(main) = index.main_skill(project) else {
        return Ok(SlackSettings::default());
    };
    let mut errors = ConfigErrors::default();
    let skill = Some(main.location().to_string());
    let merged = match cascade::merged_for(index, main) {
        Ok(merged) => merged,
        Err(e) => {
            errors.push(skill, "metadata", e.to_string());
            return Err(errors);
        }
    };
    let Some(section) = merged.metadata.get("slack") else {
        return Ok(SlackSettings::default());
    };
    let written = main.metadata.get("slack");
    for secret in SECRETS {
        if let Some(Value::String(raw)) = written.and_then(|w| w.get(secret.key))
            && let Some(refused) = secret.refuses(raw, "the skill file")
        {
            let path = format!("metadata.slack.{}", secret.key);
            errors.push(skill.clone(), path, refused);
        }
    }
    match serde_json::from_value::<SlackSettings>(section.clone()) {
        Ok(settings) => errors.or_ok(settings),
        Err(e) => {
            errors.push(skill, "metadata.slack", e.to_string());
            Err(errors)
        }
    }
}
