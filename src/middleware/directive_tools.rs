//! The directive tools that read values and tools: `:arg`, `:env`, `:context`, `:config`,
//! `:skill` and `:tool`, and the shape every directive tool shares ([`directive`]).
//!
//! Each replaces its placeholder in the served prompt with text, then continues the chain.
//! Invoked as plain metadata middleware (no directive index) they just pass. A failure names
//! where the directive is (`file:line:column`) and the directive's text.

use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{Result, SkillError};
use crate::kernel::InvokeOptions;
use crate::middleware::directives::{location, placeholder};
use crate::skills::native::{native, pass};
use crate::skills::tool::Tool;

pub fn tools() -> Vec<Tool> {
    vec![
        native(
            &frontmatter("arg", "Inserts an argument: :arg[name]{default=...}"),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    let from_params = target.get(&format!("locals.params.{label}")).ok().flatten();
                    let value = match from_params {
                        Some(v) => Some(v),
                        None => target.get(&format!("args.{label}"))?,
                    };
                    Ok(value.or_else(|| attr(&args, "default")))
                })
            },
        ),
        native(
            &frontmatter(
                "env",
                "Inserts an environment variable: :env[NAME]{default=...}",
            ),
            |ctx, args| {
                directive(ctx, args, |_target, label, args| async move {
                    Ok(std::env::var(&label)
                        .ok()
                        .map(Value::String)
                        .or_else(|| attr(&args, "default")))
                })
            },
        ),
        native(
            &frontmatter(
                "context",
                "Inserts a context property by dotted path: :context[locals.x]",
            ),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    Ok(target.get(&label)?.or_else(|| attr(&args, "default")))
                })
            },
        ),
        native(
            &frontmatter("config", "Inserts a value of locals.config: :config[cwd]"),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    Ok(target
                        .get(&format!("locals.config.{label}"))?
                        .or_else(|| attr(&args, "default")))
                })
            },
        ),
        native(
            &frontmatter(
                "skill",
                "Inserts another skill's result: :skill[name]{arg=value}",
            ),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    let call_args = args.get("attrs").cloned().unwrap_or_else(|| json!({}));
                    let out = target
                        .invoke(label.as_str(), call_args, InvokeOptions::default())
                        .await?;
                    Ok(out.map(|v| (*v).clone()))
                })
            },
        ),
        native(
            &frontmatter(
                "tool",
                "Describes a tool for a model: :tool[name]{format=json}",
            ),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    let index = target.index();
                    let tool = index.find(&label)?;
                    let params = tool.params().cloned();
                    Ok(Some(match attr(&args, "format").as_ref().and_then(Value::as_str) {
                        Some("json") => Value::String(
                            json!({"name": tool.name, "description": tool.description, "params": params})
                                .to_string(),
                        ),
                        None | Some("text") => Value::String(describe(&tool.name, &tool.description, params.as_ref())),
                        Some(other) => {
                            return Err(SkillError::config(format!(
                                "`format` must be `text` or `json`, got `{other}`"
                            )));
                        }
                    }))
                })
            },
        ),
    ]
}

/// One line a model can read: the name, what it does, and its args schema when it has one.
fn describe(name: &str, description: &str, params: Option<&Value>) -> String {
    let mut out = format!("`{name}`");
    if !description.is_empty() {
        out.push_str(": ");
        out.push_str(description.trim());
    }
    if let Some(params) = params {
        out.push_str(&format!(" (args: {params})"));
    }
    out
}

pub(crate) fn frontmatter(name: &str, description: &str) -> String {
    format!(
        "name: {name}\ndescription: \"{description}\"\nmetadata:\n  role: directive\n  visibility: hidden\n  tags: [meta-internal, directive]\n"
    )
}

pub(crate) fn attr(args: &Value, key: &str) -> Option<Value> {
    args.get("attrs").and_then(|a| a.get(key)).cloned()
}

/// Shared shape of a directive tool: compute a value, put its text in the placeholder, go on.
/// `compute` gets the served context, the label and the directive's args (`attrs`, `at`, ...).
pub(crate) async fn directive<F, Fut>(
    ctx: Context,
    args: std::sync::Arc<Value>,
    compute: F,
) -> Result<Option<Value>>
where
    F: FnOnce(Context, String, Value) -> Fut,
    Fut: std::future::Future<Output = Result<Option<Value>>>,
{
    let target = ctx.ctx_target()?;
    let Some(index) = args.get("index").and_then(Value::as_u64) else {
        return pass(&target).await;
    };
    let label = args
        .get("label")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let value = compute(target.clone(), label, (*args).clone())
        .await
        .map_err(|e| target.fail(located(e, &target, &args)))?;
    let text = match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
    };
    if !target.fill_prompt(&placeholder(index as usize), &text) {
        return Err(SkillError::internal("directive without a prompt"));
    }
    drop(text);
    pass(&target).await
}

/// Puts the directive's place and text before a failure's message.
fn located(error: SkillError, target: &Context, args: &Value) -> SkillError {
    let offset = args
        .get("offset")
        .and_then(Value::as_u64)
        .map(|o| o as usize);
    let at = location(&target.tool(), offset);
    match args.get("source").and_then(Value::as_str) {
        Some(source) => error.prefixed(&format!("{at}: `{source}`: ")),
        None => error.prefixed(&format!("{at}: ")),
    }
}
