//! The embedded JavaScript engine (QuickJS through `rquickjs`): `.skill.js` tools, and a sandbox
//! for untrusted code that reaches the host only through the ctx bridge.
//!
//! - `script`: `.skill.js` files at load time (frontmatter, syntax errors) and the code a tool runs.
//! - `engine`: a runtime with its limits and interrupt handler, and one call in it.
//! - `bytecode`: modules compiled once (the prelude, each `.skill.js`), loaded per call.
//! - `bridge` (with `prelude.js`, `views.js`): the ctx API a script sees, every rule enforced
//!   host side.
//! - `refs`: the untrusted-ref rule (bare tool names only).
//! - `limits`: `metadata.sandbox` (memory, stack, time, wall), defaults, the meter.
//! - `session`: a sandbox kept across calls, with its `memory` global.
//! - `stock`: fresh sandboxes made ahead of the calls that take them, freed after the answer.
//! - `convert`: JSON and errors across the boundary, with its depth limit and cycle rule.
//! - `pool`: the sandbox threads every call, and the kernel work scripts start, run on, off the
//!   runtime that serves I/O.
//!
//! Nothing outside this folder names `rquickjs`; another engine would replace this folder only.

mod bridge;
mod bytecode;
mod convert;
mod engine;
pub mod limits;
mod observer;
mod pool;
mod refs;
pub mod script;
mod session;
mod stock;

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::error::Result;
use crate::kernel::{InvokeOptions, ToolRef};
use crate::skills::frontmatter;
use crate::skills::tool::{Body, ScriptBody, Source, Tool};
use futures::future::BoxFuture;

pub use bridge::IN_FLIGHT;
pub use limits::{Limit, Limits};
pub use observer::Observer;
pub use pool::{QUEUE_VAR, THREADS_VAR, set_queue_limit, threads};
pub use script::{Code, Script, load};
pub use session::Session;

use engine::Call;

/// Runs a scripted tool's body against the served context (the `execute` step).
pub(crate) async fn run_script(served: &Context, script: &Arc<Script>) -> Result<Option<Value>> {
    let sandbox = served.get("run.middleware.sandbox")?;
    let limits = Limits::from_metadata(sandbox.as_ref())?;
    if script.untrusted {
        served.mark_untrusted();
    }
    let call = Call {
        served: served.clone(),
        script: script.clone(),
        limits,
        // Replaced by the token `pool::run` cancels if this future is dropped.
        gone: Default::default(),
    };
    let out = pool::run(move |gone| run_call(Call { gone, ..call })).await;
    // The script's own errors are the served tool's (not those of `execute`, which ran it).
    out.map_err(|e| match e.tool() {
        Some(_) => e,
        None => e.with_tool(served.tool_name()),
    })
}

/// One call, on a sandbox thread: in the script's session, or in a fresh sandbox.
async fn run_call(call: Call) -> Result<Option<Value>> {
    if call.gone.is_cancelled() {
        // The caller left while the call waited for a thread.
        return Ok(None);
    }
    match call.script.session.clone() {
        Some(session) => session.run(call).await,
        None => {
            let engine = stock::fresh().await?;
            let ran = engine.run(call).await;
            stock::discard(engine);
            ran.result
        }
    }
}

/// A script is a body the kernel runs without knowing the engine.
impl ScriptBody for Script {
    fn origin(&self) -> &str {
        &self.origin
    }

    fn run(self: Arc<Self>, served: Context) -> BoxFuture<'static, Result<Option<Value>>> {
        Box::pin(async move { run_script(&served, &self).await })
    }
}

/// How [`run_untrusted_with`] runs code.
#[derive(Default, Clone)]
pub struct Untrusted {
    /// The anonymous skill's args (`args` in the code); default `{}`.
    pub args: Option<Value>,
    /// More metadata for the anonymous skill: `allowed-tools`, `sandbox` limits, middleware.
    pub metadata: Map<String, Value>,
    /// The context the code serves (middleware mode: `ctxTarget(ctx).manager.next()`).
    pub target: Option<Context>,
    /// Runs in this session (its `memory` global persists), else in a fresh sandbox.
    pub session: Option<Session>,
    /// The anonymous skill's name (default `anonymous`); its origin is `inline://<name>`.
    pub name: Option<String>,
    /// Collects the code's console output and whether it called `ctx.manager.finish`.
    pub observer: Option<Arc<Observer>>,
}

/// Runs untrusted JavaScript as an anonymous inline skill through the full pipeline, invoked
/// from `ctx`: the code is the body of `async function (ctx, args)`, returns or
/// `ctx.manager.finish`es its result, and may only invoke bare tool names.
pub async fn run_untrusted(
    ctx: &Context,
    code: &str,
    session: Option<&Session>,
) -> Result<Option<Value>> {
    let options = Untrusted {
        session: session.cloned(),
        ..Untrusted::default()
    };
    run_untrusted_with(ctx, code, options).await
}

/// [`run_untrusted`] with args, metadata, a target or a name.
pub async fn run_untrusted_with(
    ctx: &Context,
    code: &str,
    options: Untrusted,
) -> Result<Option<Value>> {
    let args = options.args.clone().unwrap_or_else(|| json!({}));
    let target = options.target.clone();
    let observer = options.observer.clone();
    let tool = anonymous(code, options)?;
    let mut invoke = InvokeOptions::default();
    invoke.context.target = target;
    if let Some(observer) = observer {
        invoke
            .context
            .extensions
            .push((observer::PATH.into(), observer));
    }
    let out = ctx
        .invoke(ToolRef::Def(Arc::new(tool)), args, invoke)
        .await?;
    Ok(out.map(|v| (*v).clone()))
}

/// The anonymous skill around untrusted code.
fn anonymous(code: &str, options: Untrusted) -> Result<Tool> {
    let name = options.name.unwrap_or_else(|| "anonymous".into());
    let origin = format!("inline://{name}");
    let mut metadata = options.metadata;
    metadata
        .entry("visibility")
        .or_insert_with(|| json!("hidden"));
    metadata.entry("tags").or_insert_with(|| json!(["inline"]));
    let mut fm = Map::new();
    fm.insert("name".into(), Value::String(name));
    fm.insert(
        "description".into(),
        json!("Code submitted at run time, run as untrusted."),
    );
    fm.insert("metadata".into(), Value::Object(metadata));
    frontmatter::check(&origin, &mut fm)?;
    Limits::from_metadata(fm.get("metadata").and_then(|m| m.get("sandbox")))?;
    let script = Script {
        origin: origin.clone(),
        code: Code::Body(Arc::from(code)),
        untrusted: true,
        session: options.session,
    };
    Ok(Tool::new(
        fm,
        Source::Inline(origin),
        None,
        Body::Script(Arc::new(script)),
    ))
}
