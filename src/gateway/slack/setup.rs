//! Putting the Slack settings together when the server starts: the config file's `slack:`
//! section over `metadata.slack` of the project's main skill, over Slack's variables; tokens
//! written out in the skill file refused (write `${env.NAME}`); the skills the routes name
//! checked; the queue made.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::cascade;
use crate::config::slack::{SlackConfig, SlackSettings};
use crate::gateway::Gateway;
use crate::gateway::slack::{Slack, worker};
use crate::skills::index::SearchIndex;

const SECRETS: [&str; 3] = ["bot-token", "signing-secret", "app-token"];

/// The Slack transport of this project, `None` when it has no Slack routes; every mistake.
pub async fn configure(
    gateway: &Gateway,
    index: &SearchIndex,
    project: &Path,
    file: SlackSettings,
) -> Result<Option<Arc<Slack>>, Vec<String>> {
    let Some(config) = settings(index, project, file)? else {
        return Ok(None);
    };
    let mut errors = Vec::new();
    for (at, skill) in config.named_skills() {
        if index.get(&skill).is_none() {
            errors.push(format!("{at}: no skill is named `{skill}`"));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    worker::prepare(gateway)
        .await
        .map_err(|e| vec![format!("slack: the event queue could not be made: {e}")])?;
    Ok(Some(Arc::new(Slack::new(gateway, config))))
}

/// The resolved settings: `file` over the main skill's `metadata.slack` over Slack's variables.
pub fn settings(
    index: &SearchIndex,
    project: &Path,
    file: SlackSettings,
) -> Result<Option<SlackConfig>, Vec<String>> {
    let settings = file.or(from_main_skill(index, project)?);
    let env = |name: &str| std::env::var(name).ok();
    SlackConfig::resolve(settings, &env)
}

/// `metadata.slack` of the main skill (through its cascade, so `${env.NAME}` is filled in).
fn from_main_skill(index: &SearchIndex, project: &Path) -> Result<SlackSettings, Vec<String>> {
    let Some(main) = index.main_skill(project) else {
        return Ok(SlackSettings::default());
    };
    let merged = cascade::merged_for(index, main).map_err(|e| vec![e.to_string()])?;
    let Some(section) = merged.metadata.get("slack") else {
        return Ok(SlackSettings::default());
    };
    let at = format!("{}: metadata.slack", main.location());
    let written = main.metadata.get("slack");
    let mut errors = Vec::new();
    for key in SECRETS {
        if let Some(Value::String(raw)) = written.and_then(|w| w.get(key))
            && !raw.contains("${env.")
        {
            errors.push(format!(
                "{at}.{key}: a secret is written in the skill file; use a reference such as `${{env.SLACK_BOT_TOKEN}}`"
            ));
        }
    }
    let settings = serde_json::from_value::<SlackSettings>(section.clone())
        .map_err(|e| vec![format!("{at}: {e}")])?;
    if errors.is_empty() {
        Ok(settings)
    } else {
        Err(errors)
    }
}
