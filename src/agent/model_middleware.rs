//! `model`: checks the served skill's `metadata.model` before anything runs and records it,
//! normalised to `{provider, model, ...settings}`, in `locals.config.model` (the agent itself
//! reads the cascade, so code that rewrites `locals.config` cannot redirect a model call).
//! When the project replaces the built-in `agent` skill, the settings mean what that agent
//! makes of them: they are recorded as written, unchecked.

use serde_json::{Map, Value, json};

use crate::agent::config::AgentConfig;
use crate::agent::policy::{AGENT, BUILT_IN_TAG};
use crate::skills::native::served_at;
use crate::skills::native::{metadata_middleware, pass};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "model",
        "Checks the served skill's model settings and records them in locals.config.model.",
        |target, args| async move {
            if args.is_null() {
                return pass(&target).await;
            }
            let built_in = target
                .index()
                .get(AGENT)
                .is_some_and(|agent| agent.tags.iter().any(|t| t == BUILT_IN_TAG));
            if !built_in {
                target.set("locals.config.model", (*args).clone())?;
                return pass(&target).await;
            }
            let config = AgentConfig::parse(&args)
                .map_err(|e| target.fail(e.prefixed(&served_at(&target))))?;
            target.set("locals.config.model", normalised(&args, &config))?;
            pass(&target).await
        },
    )
}

/// The settings as written, with `provider` and `model` split out of `provider/model-id`.
fn normalised(written: &Value, config: &AgentConfig) -> Value {
    let mut out = Map::new();
    out.insert("provider".into(), json!(config.provider));
    out.insert("model".into(), json!(config.model));
    if let Value::Object(settings) = written {
        for (key, value) in settings {
            out.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    Value::Object(out)
}
