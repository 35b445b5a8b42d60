//! `metadata.model`: which model answers (`provider/model-id`, or an object) and the agent's
//! limits, read once per run with errors that name the key.
//!
//! Keys may be written in camelCase (as the spec does: `maxTurns`) or kebab-case
//! (`max-turns`), as metadata elsewhere is.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{Result, SkillError};

/// The built-in provider skill: the policy hands it the loop unless `model.agent` or a
/// project's [`SPEC_PROVIDER_SKILL`] names another.
pub const DEFAULT_PROVIDER_SKILL: &str = "agent-model";

/// The specification's name for the default provider: a project's skill of this name runs the
/// loop unless `model.agent` names another; without one, the name means the built-in provider.
pub const SPEC_PROVIDER_SKILL: &str = "agent-strands";

/// The vendors skillgate speaks to.
pub const PROVIDERS: [&str; 3] = ["openai", "anthropic", "bedrock"];

/// One agent run's model and limits.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// `openai`, `anthropic` or `bedrock`.
    pub provider: String,
    /// The vendor's model id.
    pub model: String,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// Model calls before the agent stops; `None` in persistent mode (no limit).
    pub max_turns: Option<u32>,
    /// Code runs (invoke tool calls) across all turns.
    pub max_steps: u32,
    /// Tokens in and out across all calls before the agent stops.
    pub token_budget: Option<u64>,
    /// Wall clock of the whole run.
    pub timeout: Option<Duration>,
    pub persistent: bool,
    /// Clear old tool results as the conversation nears `context_window`.
    pub context_edit: bool,
    /// The model's context window in tokens (for context editing).
    pub context_window: u64,
    /// `model.agent`: the provider skill running the loop, when the metadata names one (see
    /// [`AgentConfig::provider_skill`]).
    pub agent: Option<String>,
    /// The vendor's base URL (else its conventional variable, else its public API).
    pub base_url: Option<String>,
    /// The variable holding the API key (else the vendor's conventional one).
    pub api_key_env: Option<String>,
    /// Bedrock's region (else `AWS_REGION`, `AWS_DEFAULT_REGION`).
    pub region: Option<String>,
    /// Longest wait for one answer to start, and between two streamed pieces.
    pub request_timeout: Duration,
    /// Retries of one call on 429, 5xx, timeouts.
    pub retries: u32,
    /// Ask for a stream (default) or the whole answer at once.
    pub stream: bool,
    /// Model hooks: middleware skills around each model call (spec 04).
    pub hooks: Vec<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            provider: String::new(),
            model: String::new(),
            temperature: None,
            max_tokens: None,
            max_turns: Some(30),
            max_steps: 30,
            token_budget: None,
            timeout: None,
            persistent: false,
            context_edit: false,
            context_window: 128_000,
            agent: None,
            base_url: None,
            api_key_env: None,
            region: None,
            request_timeout: Duration::from_secs(120),
            retries: 3,
            stream: true,
            hooks: Vec::new(),
        }
    }
}

const KEYS: &str = "provider, model, temperature, max-tokens, max-turns, max-steps, token-budget, timeout, persistent, context-edit, context-window, agent, base-url, api-key-env, region, request-timeout, retries, stream, hooks";

impl AgentConfig {
    /// The provider skill that runs the loop: `model.agent` when set; otherwise the project's
    /// `agent-strands` when it has one; otherwise the built-in provider (which `agent-strands`
    /// names too when no skill has that name).
    pub fn provider_skill(&self, index: &crate::skills::index::SearchIndex) -> String {
        let wanted = self.agent.as_deref().unwrap_or(SPEC_PROVIDER_SKILL);
        if wanted == SPEC_PROVIDER_SKILL && !index.contains(wanted) {
            return DEFAULT_PROVIDER_SKILL.to_string();
        }
        wanted.to_string()
    }

    /// Reads `metadata.model`: `"provider/model-id"` or an object.
    pub fn parse(value: &Value) -> Result<AgentConfig> {
        let mut config = AgentConfig::default();
        match value {
            Value::String(s) => config.set_model(s)?,
            Value::Object(map) => config.read(map)?,
            other => {
                return Err(bad(format!(
                    "metadata.model must be `provider/model-id` or an object with provider and model, found {other}"
                )));
            }
        }
        if config.model.is_empty() {
            return Err(bad(
                "metadata.model names no model: write `provider/model-id` (such as `openai/gpt-4o-mini`) or set `model`",
            ));
        }
        if config.provider.is_empty() {
            return Err(bad(format!(
                "metadata.model `{}` names no provider: write `provider/model-id` with a provider of {}",
                config.model,
                PROVIDERS.join(", ")
            )));
        }
        if !PROVIDERS.contains(&config.provider.as_str()) {
            return Err(bad(format!(
                "metadata.model.provider `{}` is not one skillgate speaks to ({})",
                config.provider,
                PROVIDERS.join(", ")
            )));
        }
        if config.persistent {
            config.max_turns = None;
        }
        Ok(config)
    }

    /// `provider/model-id` (the model id may itself hold `/` or `:`).
    fn set_model(&mut self, text: &str) -> Result<()> {
        match text.split_once('/') {
            Some((provider, model)) if PROVIDERS.contains(&provider) => {
                self.provider = provider.to_string();
                self.model = model.to_string();
            }
            _ => self.model = text.to_string(),
        }
        Ok(())
    }

    fn read(&mut self, map: &Map<String, Value>) -> Result<()> {
        // The provider first, so `model: openai/x` and `provider: anthropic` conflict visibly.
        let mut explicit_provider = None;
        for (key, value) in map {
            let what = format!("metadata.model.{key}");
            match normalize(key).as_str() {
                "provider" => explicit_provider = Some(string(&what, value)?),
                "model" | "modelid" => self.set_model(&string(&what, value)?)?,
                "temperature" => self.temperature = Some(number(&what, value, 0.0, 2.0)?),
                "maxtokens" => self.max_tokens = Some(count(&what, value)? as u32),
                "maxturns" => self.max_turns = Some(count(&what, value)? as u32),
                "maxsteps" => self.max_steps = count(&what, value)? as u32,
                "tokenbudget" => self.token_budget = Some(count(&what, value)?),
                "timeout" => self.timeout = Some(duration(&what, value)?),
                "persistent" => self.persistent = boolean(&what, value)?,
                "contextedit" => self.context_edit = boolean(&what, value)?,
                "contextwindow" => self.context_window = count(&what, value)?,
                "agent" => self.agent = Some(string(&what, value)?),
                "baseurl" => self.base_url = Some(string(&what, value)?),
                "apikeyenv" => self.api_key_env = Some(string(&what, value)?),
                "apikey" => {
                    return Err(bad(format!(
                        "{what}: an API key is never written in a skill; set `api-key-env` to the name of the variable that holds it"
                    )));
                }
                "region" => self.region = Some(string(&what, value)?),
                "requesttimeout" => self.request_timeout = duration(&what, value)?,
                "retries" => {
                    self.retries = value.as_u64().filter(|n| *n <= 10).ok_or_else(|| {
                        bad(format!(
                            "{what} must be a whole number from 0 to 10, found {value}"
                        ))
                    })? as u32;
                }
                "stream" => self.stream = boolean(&what, value)?,
                "hooks" => self.hooks = names(&what, value)?,
                _ => {
                    return Err(bad(format!(
                        "{what} is not a model setting (known: {KEYS})"
                    )));
                }
            }
        }
        if let Some(provider) = explicit_provider {
            if !self.provider.is_empty() && self.provider != provider {
                return Err(bad(format!(
                    "metadata.model says provider `{provider}` but its model names `{}`",
                    self.provider
                )));
            }
            self.provider = provider;
        }
        Ok(())
    }
}

/// `maxTurns`, `max-turns` and `max_turns` are one key.
fn normalize(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '-' && *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn bad(message: impl Into<String>) -> SkillError {
    SkillError::config(message)
}

fn string(what: &str, value: &Value) -> Result<String> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        other => Err(bad(format!(
            "{what} must be a non-empty string, found {other}"
        ))),
    }
}

fn boolean(what: &str, value: &Value) -> Result<bool> {
    value
        .as_bool()
        .ok_or_else(|| bad(format!("{what} must be true or false, found {value}")))
}

fn count(what: &str, value: &Value) -> Result<u64> {
    match value.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(bad(format!(
            "{what} must be a whole number above 0, found {value}"
        ))),
    }
}

fn number(what: &str, value: &Value, min: f64, max: f64) -> Result<f64> {
    match value.as_f64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(format!(
            "{what} must be a number from {min} to {max}, found {value}"
        ))),
    }
}

/// A bare number is milliseconds; a string carries `ms`, `s` or `m`.
fn duration(what: &str, value: &Value) -> Result<Duration> {
    crate::sandbox::limits::millis(what, value, 7 * 86_400_000)
}

fn names(what: &str, value: &Value) -> Result<Vec<String>> {
    let list = match value {
        Value::String(s) => s.split_whitespace().map(str::to_string).collect(),
        Value::Array(items) => items
            .iter()
            .map(|v| string(what, v))
            .collect::<Result<Vec<_>>>()?,
        other => {
            return Err(bad(format!(
                "{what} must be a list of skill names, found {other}"
            )));
        }
    };
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_string_names_provider_and_model() {
        let c = AgentConfig::parse(&json!("openai/llama3.1:8b")).unwrap();
        assert_eq!(
            (c.provider.as_str(), c.model.as_str()),
            ("openai", "llama3.1:8b")
        );
        let c = AgentConfig::parse(&json!("bedrock/anthropic.claude-3-haiku")).unwrap();
        assert_eq!(c.provider, "bedrock");
    }

    #[test]
    fn camel_and_kebab_keys_are_the_same_setting() {
        let a = AgentConfig::parse(
            &json!({"model": "anthropic/x", "maxTurns": 3, "max-steps": 4, "max_tokens": 99}),
        )
        .unwrap();
        assert_eq!(
            (a.max_turns, a.max_steps, a.max_tokens),
            (Some(3), 4, Some(99))
        );
    }

    #[test]
    fn persistent_mode_lifts_max_turns() {
        let c = AgentConfig::parse(&json!({"model": "openai/x", "persistent": true})).unwrap();
        assert_eq!(c.max_turns, None);
    }

    #[test]
    fn bad_settings_are_named() {
        for (value, needle) in [
            (json!("gpt-4o"), "names no provider"),
            (
                json!({"model": "openai/x", "maxTurns": 0}),
                "metadata.model.maxTurns",
            ),
            (
                json!({"model": "openai/x", "colour": 1}),
                "metadata.model.colour is not a model setting",
            ),
            (
                json!({"provider": "acme", "model": "x"}),
                "not one skillgate speaks to",
            ),
            (
                json!({"model": "openai/x", "api-key": "sk-1"}),
                "api-key-env",
            ),
            (
                json!({"model": "openai/x", "provider": "anthropic"}),
                "says provider",
            ),
            (json!(3), "must be `provider/model-id`"),
        ] {
            let err = AgentConfig::parse(&value).unwrap_err();
            assert!(err.message().contains(needle), "{value}: {err}");
        }
    }
}
