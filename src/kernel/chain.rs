//! The onion: `next()` walks the chain, `inject()` inserts entries downstream, hooks wrap the
//! pipeline (`$invoke`) and each entry (`$next`).
//!
//! Each `next()` is a real `await`: an entry's "after" code runs when the `next()` it called
//! returns, and errors unwind as `Err` through every `next().await` above them.

use std::collections::HashSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use crate::kernel::trace::in_span;
use serde_json::{Map, Value, json};

use crate::cascade::{Entry, EntryKind, order};
use crate::context::Context;
use crate::error::{Result, SkillError};
use crate::kernel::invoke::Output;
use crate::skills::tool::Body;

enum Step {
    Done,
    Again,
    Hook {
        hook: Entry,
        trigger: &'static str,
        entry: Option<Arc<str>>,
        depth: usize,
    },
    Entry(Arc<Vec<Entry>>, usize),
    Pending(Entry),
}

impl Context {
    /// `next()`: runs the next chain entry and resolves to `locals.result` when control returns.
    ///
    /// After the chain finished, or on an empty chain, it resolves at once.
    pub fn next(&self) -> impl Future<Output = Result<Output>> + Send + 'static {
        // Not boxed: the recursion through the orchestrator is broken by the boxed invoke.
        next(self.clone())
    }

    /// `inject(entries)`: inserts entries right after the current position.
    ///
    /// Constraints naming entries that already ran are dropped; if any injected entry still has
    /// constraints the rest of the chain is re-sorted, else the entries go in as given.
    /// Directive entries (all `directive: true`) go in after the metadata middleware still ahead
    /// of the `$execute` phase, so directive middleware runs after all metadata middleware.
    pub fn inject(&self, entries: Vec<Entry>) -> Result<()> {
        let mut state = self.0.state.lock();
        let chain = &mut state.chain;
        let pos = chain.pos.min(chain.entries.len());
        let executed: HashSet<&str> = chain.entries[..pos].iter().map(|e| &*e.name).collect();
        let strip = |names: &crate::cascade::Names| -> crate::cascade::Names {
            names
                .iter()
                .filter(|n| !executed.contains(&***n))
                .cloned()
                .collect()
        };
        let injected: Vec<Entry> = entries
            .into_iter()
            .map(|e| Entry {
                before: strip(&e.before),
                after: strip(&e.after),
                ..e
            })
            .collect();
        let resort = injected.iter().any(Entry::has_constraints);
        let mut list: Vec<Entry> = chain.entries[..pos].to_vec();
        let mut rest: Vec<Entry> = chain.entries[pos..]
            .iter()
            .map(|e| Entry {
                before: strip(&e.before),
                after: strip(&e.after),
                ..e.clone()
            })
            .collect();
        // Directive middleware runs after every metadata middleware: directive entries go in
        // right before the execution phase when it is still ahead, in document order.
        let at = if !resort && !injected.is_empty() && injected.iter().all(|e| e.directive) {
            rest.iter()
                .position(|e| e.is_sentinel() && &*e.name == "$execute")
                .unwrap_or(0)
        } else {
            0
        };
        let tail = rest.split_off(at);
        let mut ahead = rest;
        ahead.extend(injected);
        ahead.extend(tail);
        if resort {
            list.extend(order::sort(ahead)?);
        } else {
            list.extend(ahead);
        }
        chain.entries = Arc::new(list);
        chain.finished = false;
        Ok(())
    }

    /// `refresh()`: re-resolves the current tool through `locals.config.paths`, updating
    /// `run.tool`, `run.origin`, `locals.prompt` and the tool definition the body runs.
    ///
    /// Refused for a context marked untrusted: it could point `locals.config.paths` anywhere
    /// (directly, or through an injected `paths` middleware) and have tools loaded from there.
    pub fn refresh(&self) -> Result<()> {
        let (name, dirs) = {
            let state = self.0.state.lock();
            if state.locals.untrusted_ref {
                return Err(crate::error::SkillError::new(
                    crate::error::ErrorKind::Denied,
                    "untrusted code cannot refresh(): it would resolve tools through search paths it chose",
                ));
            }
            let config = &state.locals.config;
            let cwd = PathBuf::from(config.get("cwd").and_then(Value::as_str).unwrap_or("."));
            let dirs: Vec<PathBuf> = match config.get("paths") {
                Some(Value::Array(items)) => items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|p| cwd.join(p))
                    .collect(),
                _ => state.index.dirs.clone(),
            };
            (state.tool.name.clone(), dirs)
        };
        let index = self.kernel().registry().with_dirs(&dirs);
        let tool = index.find(&name)?.clone();
        let mut state = self.0.state.lock();
        state.run.tool = tool.decl.clone();
        state.run.origin = tool.origin.clone();
        state.locals.prompt = tool.prompt.clone();
        state.tool = tool;
        state.index = index;
        Ok(())
    }
}

async fn next(ctx: Context) -> Result<Output> {
    if let Some(err) = ctx.abort_error() {
        return Err(ctx.fail(err));
    }
    loop {
        match step(&ctx) {
            Step::Done => return Ok(ctx.result()),
            Step::Again => continue,
            Step::Hook {
                hook,
                trigger,
                entry,
                depth,
            } => {
                let out = run_hook(&ctx, &hook, trigger, entry).await;
                {
                    // A `$next` hook that did not call `next()` skipped its entry.
                    let mut state = ctx.0.state.lock();
                    if trigger == "$next" && state.chain.pending.len() >= depth {
                        state.chain.pending.truncate(depth - 1);
                    }
                }
                settle(&ctx, out?);
                return Ok(ctx.result());
            }
            Step::Entry(list, i) => {
                if let Some(err) = ctx.abort_error() {
                    return Err(ctx.fail(err));
                }
                let entry = &list[i];
                match run_entry(&ctx, entry).await? {
                    Ran::Value(out) => {
                        settle(&ctx, out);
                        return Ok(ctx.result());
                    }
                    Ran::Skipped => continue,
                }
            }
            Step::Pending(entry) => match run_entry(&ctx, &entry).await? {
                Ran::Value(out) => {
                    settle(&ctx, out);
                    return Ok(ctx.result());
                }
                Ran::Skipped => continue,
            },
        }
    }
}

/// Picks what `next()` does now, under the lock.
fn step(ctx: &Context) -> Step {
    let mut state = ctx.0.state.lock();
    let chain = &mut state.chain;
    if chain.finished {
        return Step::Done;
    }
    if chain.invoke_pos < chain.invoke_hooks.len() {
        let hook = chain.invoke_hooks[chain.invoke_pos].clone();
        chain.invoke_pos += 1;
        return Step::Hook {
            hook,
            trigger: "$invoke",
            entry: None,
            depth: 0,
        };
    }
    let hooks = chain.next_hooks.len();
    let depth = chain.pending.len();
    if let Some((entry, done)) = chain.pending.last_mut() {
        if *done < hooks {
            let hook = chain.next_hooks[*done].clone();
            *done += 1;
            return Step::Hook {
                hook,
                trigger: "$next",
                entry: Some(entry.name.clone()),
                depth,
            };
        }
        let (entry, _) = chain.pending.pop().expect("checked above");
        return Step::Pending(entry);
    }
    // Sentinels only order the chain; pass them under the same lock.
    while chain.entries.get(chain.pos).is_some_and(Entry::is_sentinel) {
        chain.pos += 1;
    }
    if chain.pos >= chain.entries.len() {
        return Step::Done;
    }
    let i = chain.pos;
    chain.pos += 1;
    if hooks > 0 {
        chain.pending.push((chain.entries[i].clone(), 0));
        return Step::Again;
    }
    Step::Entry(chain.entries.clone(), i)
}

/// A non-undefined return sets the served result and finishes the chain.
fn settle(ctx: &Context, out: Output) {
    if let Some(value) = out {
        let mut state = ctx.0.state.lock();
        state.locals.result = Some(value);
        state.chain.finished = true;
    }
}

enum Ran {
    Value(Output),
    Skipped,
}

async fn run_entry(served: &Context, entry: &Entry) -> Result<Ran> {
    let out = match &entry.kind {
        EntryKind::Sentinel => return Ok(Ran::Skipped),
        EntryKind::Body => run_body(served).await?.map(Arc::new),
        EntryKind::Fn(f) => f(served.clone()).await?.map(Arc::new),
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
            let run = served.invoke_entry(&entry.name, entry.args.clone(), Map::new(), Map::new());
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
        if *ctx.0.created_for.name == *name {
            return true;
        }
        match &ctx.0.target {
            Some(t) => ctx = t.clone(),
            None => return false,
        }
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
        Some(name) => {
            let state = served.0.state.lock();
            state
                .chain
                .pending
                .last()
                .filter(|(e, _)| e.name == *name)
                .map_or_else(|| Arc::new(Value::Null), |(e, _)| e.args.clone())
        }
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
        .invoke_entry(&hook.name, args, locals, nonlocals)
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
