//! The onion: `next()` walks the chain, `inject()` inserts entries downstream, hooks wrap the
//! pipeline (`$invoke`) and each entry (`$next`).
//!
//! Each `next()` is a real `await`: an entry's "after" code runs when the `next()` it called
//! returns, and errors unwind as `Err` through every `next().await` above them.

use std::future::Future;
use std::sync::Arc;

use crate::kernel::trace::in_span;
use serde_json::{Map, Value, json};

use crate::cascade::{Entry, EntryKind};
use crate::context::Context;
use crate::context::chain::Step;
use crate::error::{Result, SkillError};
use crate::kernel::invoke::Output;
use crate::kernel::timings;
use crate::skills::tool::Body;

impl Context {
    /// `next()`: runs the next chain entry and resolves to `locals.result` when control returns.
    ///
    /// After the chain finished, or on an empty chain, it resolves at once.
    pub fn next(&self) -> impl Future<Output = Result<Output>> + Send + 'static {
        // Not boxed: the recursion through the orchestrator is broken by the boxed invoke.
        next(self.clone())
    }
}

async fn next(ctx: Context) -> Result<Output> {
    if let Some(err) = ctx.abort_error() {
        return Err(ctx.fail(err));
    }
    // Whether the check above still holds: nothing has run since (the first entry taken is
    // not checked twice; after an entry is skipped it is checked again).
    let mut checked = true;
    loop {
        // One `run_entry` await for both kinds of entry keeps this future small: it is nested
        // once per middleware layer.
        let ran = match ctx.chain_step() {
            Step::Done => return Ok(ctx.result()),
            Step::Again => continue,
            Step::Hook {
                hook,
                trigger,
                entry,
                depth,
            } => {
                // Boxed: hooks are rare, and their future is as large as the rest of `next`.
                let out = Box::pin(run_hook(&ctx, &hook, trigger, entry)).await;
                if trigger == "$next" {
                    ctx.drop_skipped_entry(depth);
                }
                ctx.settle(out?);
                return Ok(ctx.result());
            }
            Step::Entry(list, i) => {
                if !std::mem::take(&mut checked)
                    && let Some(err) = ctx.abort_error()
                {
                    return Err(ctx.fail(err));
                }
                run_entry(&ctx, &list[i]).await?
            }
            Step::Pending(entry) => run_entry(&ctx, &entry).await?,
        };
        match ran {
            Ran::Value(out) => {
                ctx.settle(out);
                return Ok(ctx.result());
            }
            Ran::Skipped => continue,
        }
    }
}

enum Ran {
    Value(Output),
    Skipped,
}

async fn run_entry(served: &Context, entry: &Entry) -> Result<Ran> {
    // Timed only for a run that asked (the runs record's), and only entries that run.
    let start = match &entry.kind {
        EntryKind::Sentinel => None,
        EntryKind::Tool if entry.idle => None,
        _ => timings::entry_start(),
    };
    let Some(start) = start else {
        return run_untimed(served, entry).await;
    };
    let ran = run_untimed(served, entry).await;
    let kind = match entry.kind {
        EntryKind::Body => "body",
        EntryKind::Fn(_) => "fn",
        _ => "middleware",
    };
    timings::entry_done(
        timings::Entry {
            name: &entry.name,
            kind,
            skill: served.tool_name(),
            depth: served.depth(),
            ok: ran.is_ok(),
        },
        start,
    );
    ran
}

async fn run_untimed(served: &Context, entry: &Entry) -> Result<Ran> {
    let out = match &entry.kind {
        EntryKind::Sentinel => return Ok(Ran::Skipped),
        EntryKind::Body => run_body(served).await?.map(Arc::new),
        EntryKind::Fn(f) => f(served.clone()).await?.map(Arc::new),
        // Nothing to do for this tool: the same as invoking it and having it call `next()`.
        EntryKind::Tool if entry.idle => return Ok(Ran::Skipped),
        EntryKind::Tool => {
            if in_pipeline_ancestry(served, &entry.name) {
                let _ = served.log(json!({
                    "type": "cycle-skipped",
                    "tag": "kernel",
                    "level": "warn",
                    "text": format!("skipped middleware `{}`: it is already in this pipeline's ancestry", entry.name),
                    "entry": &*entry.name,
                }));
                return Ok(Ran::Skipped);
            }
            // One span per chain entry, named after the middleware (see `kernel::trace`).
            let span = tracing::debug_span!(
                "entry",
                otel.name = &*entry.name,
                middleware = &*entry.name,
                skill = served.tool_name(),
            );
            let run = served.invoke_entry(entry.name.clone(), entry.args.clone(), None);
            in_span(span, run).await?
        }
    };
    Ok(Ran::Value(out))
}

/// True if `name` is the served tool or a tool its pipeline is serving, walking up through
/// middleware contexts only: independent invocations start a fresh pipeline.
fn in_pipeline_ancestry(served: &Context, name: &str) -> bool {
    let mut ctx = served.clone();
    loop {
        if ctx.tool_name() == name {
            return true;
        }
        if !ctx.has_other_target() {
            return false;
        }
        ctx = ctx.target();
    }
}

/// Runs the served tool's own body: native code, the expanded prompt of a template, or a script.
pub(crate) async fn run_body(served: &Context) -> Result<Option<Value>> {
    let tool = served.tool();
    match &tool.body {
        // The body's own errors are the served tool's (not those of `execute`, which ran it),
        // so a caller's mistake a native tool reports stays the caller's (422, not 500).
        Body::Native(f) => f(served.clone(), served.args()).await.map_err(|e| {
            if e.tool().is_none() {
                e.with_tool(served.tool_name())
            } else {
                e
            }
        }),
        Body::Template => Ok(Some(Value::String(
            served.prompt_expanded().unwrap_or_default(),
        ))),
        // Boxed: the engine's future is large, and `next()` futures nest once per layer.
        Body::Script(script) => script.clone().run(served.clone()).await,
    }
}

/// Invokes a hook serving `served`. `$next` hooks get the entry's args, `$invoke` hooks the
/// tool's args; `locals.hook` says which trigger and entry. Hooks run with
/// `nonlocals.debug = false` so they never instrument themselves.
async fn run_hook(
    served: &Context,
    hook: &Entry,
    trigger: &str,
    entry: Option<Arc<str>>,
) -> Result<Output> {
    let args = match &entry {
        Some(name) => served.pending_args(name),
        None => served.args(),
    };
    let mut locals = Map::new();
    locals.insert(
        "hook".into(),
        json!({
            "trigger": trigger,
            "entry": entry.as_deref(),
            "config": &*hook.args,
        }),
    );
    let mut nonlocals = Map::new();
    nonlocals.insert("debug".into(), Value::Bool(false));
    served
        .invoke_entry(hook.name.clone(), args, Some((locals, nonlocals)))
        .await
}

/// Checks that `ctx` is middleware and returns the served context (`ctxTarget`).
pub fn ctx_target(ctx: &Context) -> Result<Context> {
    ctx.ctx_target()
}

#[allow(dead_code)]
fn _assert_send(ctx: Context) -> impl Send {
    next(ctx)
}

impl From<&str> for SkillError {
    fn from(s: &str) -> Self {
        SkillError::failed(s)
    }
}

impl From<String> for SkillError {
    fn from(s: String) -> Self {
        SkillError::failed(s)
    }
}
