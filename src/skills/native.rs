//! Native tools: a tool built from YAML frontmatter and a Rust body, the way every built-in is
//! made (the kernel's, the event bus's, the doors', the agent's), and `pass`, how a middleware
//! goes on with the chain it serves.

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use serde_json::{Map, Value};

use crate::context::Context;
use crate::error::Result;
use crate::skills::frontmatter;
use crate::skills::tool::{Body, NativeFn, Source, Tool};

/// Builds a native tool from its YAML frontmatter and an async body.
///
/// The frontmatter is checked like a skill file's; an invalid one is a bug in the caller, so
/// this panics with the message (it never depends on user input).
pub fn native<F, Fut>(yaml: &str, body: F) -> Tool
where
    F: Fn(Context, Arc<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Value>>> + Send + 'static,
{
    let f: NativeFn = Arc::new(move |ctx, args| body(ctx, args).boxed());
    native_fn(yaml, f)
}

/// A metadata middleware: the one that acts on the metadata key of its name (`cwd`, `mcp`,
/// `session`, ...), hidden from listings and tagged as pipeline machinery. Its body gets the
/// served context and the key's value.
pub fn metadata_middleware<F, Fut>(name: &str, description: &str, body: F) -> Tool
where
    F: Fn(Context, Arc<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Value>>> + Send + 'static,
{
    served_middleware(name, description, "meta-metadata", body)
}

/// A pipeline middleware of the kernel's own chain (`execute`, `validate-args`, ...): hidden,
/// tagged as pipeline machinery. Its body gets the served context and its own args.
pub fn pipeline_middleware<F, Fut>(name: &str, description: &str, body: F) -> Tool
where
    F: Fn(Context, Arc<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Value>>> + Send + 'static,
{
    served_middleware(name, description, "pipeline", body)
}

/// A hidden middleware tagged `meta-internal` and `tag` whose body works on the context it
/// serves.
fn served_middleware<F, Fut>(name: &str, description: &str, tag: &str, body: F) -> Tool
where
    F: Fn(Context, Arc<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Value>>> + Send + 'static,
{
    let body = Arc::new(body);
    native(&hidden(name, description, tag), move |ctx, args| {
        let body = body.clone();
        async move { body(ctx.ctx_target()?, args).await }
    })
}

/// A hook on `$invoke` and `$next` (`debug`, `profile`): hidden, tagged `hook`, switched on by
/// the metadata key of its name. Its body gets the served context and `locals.hook`: `entry`,
/// the chain entry it wraps (none around the whole pipeline), and `config`, the key's value.
pub fn hook_middleware<F, Fut>(name: &str, description: &str, body: F) -> Tool
where
    F: Fn(Context, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Value>>> + Send + 'static,
{
    let yaml = hidden(name, description, "hook") + "  $hook: { $self: [$invoke, $next] }\n";
    let body = Arc::new(body);
    native(&yaml, move |ctx, _args| {
        let body = body.clone();
        async move {
            let hook = ctx.get("locals.hook")?.unwrap_or(Value::Null);
            body(ctx.ctx_target()?, hook).await
        }
    })
}

/// The frontmatter of a hidden middleware tagged `meta-internal` and `tag`.
fn hidden(name: &str, description: &str, tag: &str) -> String {
    format!(
        "name: {name}\ndescription: {}\nmetadata:\n  role: middleware\n  visibility: hidden\n  tags: [meta-internal, {tag}]\n",
        Value::String(description.to_string())
    )
}

/// Builds a native tool from frontmatter and an already boxed body.
pub fn native_fn(yaml: &str, body: NativeFn) -> Tool {
    let mut fm = frontmatter::parse_yaml("native tool", yaml, 1)
        .and_then(|mut fm| frontmatter::check("native tool", &mut fm).map(|()| fm))
        .unwrap_or_else(|e| panic!("invalid native frontmatter: {e}\n{yaml}"));
    fm.entry("description")
        .or_insert_with(|| Value::String(String::new()));
    Tool::new(fm, Source::Native, None, Body::Native(body))
}

/// Continues the served chain and returns undefined, so the served result stays as it is.
pub async fn pass(target: &Context) -> Result<Option<Value>> {
    target.next().await?;
    Ok(None)
}

/// An [`IdleWhen`](crate::skills::tool::IdleWhen) for a middleware that only acts when the
/// served tool's cascade has `key` (not `null`).
pub(crate) fn idle_without(key: &str, metadata: &Map<String, Value>) -> bool {
    metadata.get(key).is_none_or(Value::is_null)
}

/// `` `name` (file): ``: the served skill and where it is declared, put before a mistake in
/// its settings.
pub(crate) fn served_at(target: &Context) -> String {
    format!("`{}` ({}): ", target.tool_name(), target.tool().location())
}

/// The served context's working folder (`locals.config.cwd`), `.` when it has none; relative
/// settings of config middleware are taken from it.
pub(crate) fn working_dir(target: &Context) -> Result<std::path::PathBuf> {
    Ok(target
        .get("locals.config.cwd")?
        .and_then(|v| v.as_str().map(std::path::PathBuf::from))
        .unwrap_or_else(|| std::path::PathBuf::from(".")))
}
