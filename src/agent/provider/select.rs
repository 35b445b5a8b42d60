//! Which [`Provider`] a run's config asks for: base URL and key from the config, else the
//! vendor's conventional variables; one client per distinct endpoint for the whole process, so
//! runs share connections.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::{Provider, anthropic, bedrock, openai};
use crate::agent::config::AgentConfig;
use crate::error::{Result, SkillError};

/// The provider for `config`, reading variables through `env`.
pub fn provider_for(
    config: &AgentConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Provider>> {
    let (base_var, key_var, default) = match config.provider.as_str() {
        "openai" => ("OPENAI_BASE_URL", "OPENAI_API_KEY", openai::DEFAULT_BASE),
        "anthropic" => (
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY",
            anthropic::DEFAULT_BASE,
        ),
        "bedrock" => return bedrock_for(config, env),
        other => {
            return Err(SkillError::config(format!("no model provider `{other}`")));
        }
    };
    let base = config
        .base_url
        .clone()
        .or_else(|| env(base_var))
        .unwrap_or_else(|| default.to_string());
    let key = env(config.api_key_env.as_deref().unwrap_or(key_var));
    let cache_key = format!(
        "{}\n{base}\n{}\n{:?}\n{}",
        config.provider,
        key.as_deref().unwrap_or_default(),
        config.request_timeout,
        config.stream
    );
    Ok(cached(cache_key, || match config.provider.as_str() {
        "openai" => {
            let p = openai::OpenAi::new(&base, key.clone(), config.request_timeout);
            Arc::new(if config.stream { p } else { p.whole() })
        }
        _ => Arc::new(anthropic::Anthropic::new(
            &base,
            key.clone(),
            config.request_timeout,
        )),
    }))
}

fn bedrock_for(
    config: &AgentConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Provider>> {
    let settings = bedrock::Settings::from_env(config, env)?;
    let cache_key = format!("bedrock\n{settings:?}\n{}", settings.secret_fingerprint());
    Ok(cached(cache_key, || {
        Arc::new(bedrock::Bedrock::new(settings.clone()))
    }))
}

fn cached(key: String, make: impl FnOnce() -> Arc<dyn Provider>) -> Arc<dyn Provider> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<dyn Provider>>>> = OnceLock::new();
    let mut clients = CLIENTS.get_or_init(Default::default).lock();
    clients.entry(key).or_insert_with(make).clone()
}
