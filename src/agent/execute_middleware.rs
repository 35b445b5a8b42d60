//! `agent-execute`: hands a markdown skill that asks for a model (`metadata.model`) to the
//! agent skill; without a model it passes, and `execute` returns the expanded prompt. A
//! session's history (`locals.session.history`) is added to the prompt.

use serde_json::{Value, json};

use crate::agent::policy::AGENT;
use crate::error::{ErrorKind, SkillError};
use crate::kernel::InvokeOptions;
use crate::skills::native::{native, pass};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: agent-execute
description: Runs the served markdown skill through the agent when it configures a model.
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, pipeline]
"#,
        |ctx, _args| async move {
            let target = ctx.ctx_target()?;
            let model = target
                .metadata("model")
                .filter(|m| !m.is_null() && *m != Value::Bool(false));
            let found = match model {
                Some(model) if target.is_template() => Some((
                    model,
                    target.metadata("allowed-tools").unwrap_or(Value::Null),
                    target.metadata("returns").unwrap_or(Value::Null),
                )),
                _ => None,
            };
            let Some((model, allowed, returns)) = found else {
                return pass(&target).await;
            };
            if !target.index().contains(AGENT) {
                return Err(target.fail(SkillError::new(
                    ErrorKind::NoAgentProvider,
                    format!(
                        "`{}` asks for a model (metadata.model) but no agent provider is installed: add an `{AGENT}` skill, or remove `model` to run it as a template",
                        target.tool_name()
                    ),
                )));
            }
            let mut prompt = target.prompt_expanded().unwrap_or_default();
            // A session's earlier turns (the `session` middleware) follow the prompt.
            if let Some(Value::Array(history)) = target.get("locals.session.history")?
                && let Some(text) = crate::session::render_history(&history)
            {
                prompt.push_str("\n\n");
                prompt.push_str(&text);
            }
            let args = json!({
                "prompt": prompt,
                "config": model,
                "allowedTools": allowed,
                "returns": returns,
            });
            let mut options = InvokeOptions::default();
            options.context.extensions.push((
                crate::agent::policy::SERVED_PATH.into(),
                std::sync::Arc::new(target.clone()),
            ));
            let result = ctx.invoke(AGENT, args, options).await?;
            Ok(result.map(|r| (*r).clone()))
        },
    )
    .idle_when(|metadata, _| {
        metadata
            .get("model")
            .is_none_or(|m| m.is_null() || *m == Value::Bool(false))
    })
}
