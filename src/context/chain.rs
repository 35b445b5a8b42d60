//! The chain a context walks: its entries, the cursor `next()` moves, the hooks still to apply,
//! and the manager operations that change it (`inject`, `refresh`, installing a resolved chain).
//!
//! The kernel's `next()` drives the walk; every change to the chain state happens here.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::cascade::{Entry, order};
use crate::context::Context;
use crate::error::Result;

/// The chain being walked by `next()`.
#[derive(Default)]
pub(crate) struct Chain {
    pub(crate) entries: Arc<Vec<Entry>>,
    pub(crate) pos: usize,
    pub(crate) finished: bool,
    pub(crate) invoke_hooks: Arc<Vec<Entry>>,
    pub(crate) invoke_pos: usize,
    pub(crate) next_hooks: Arc<Vec<Entry>>,
    /// Entries taken by `next()` whose `$next` hooks are still being applied: (entry, hooks done).
    pub(crate) pending: Vec<(Entry, usize)>,
}

/// What `next()` does now: decided under the lock by [`Context::chain_step`].
pub(crate) enum Step {
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
    /// `run.tool`, `run.origin`, `locals.prompt` and the tool definition the body runs. Tools
    /// the `mcp` middleware mounted stay mounted.
    ///
    /// Refused for a context marked untrusted: it could point `locals.config.paths` anywhere
    /// (directly, or through an injected `paths` middleware) and have tools loaded from there.
    pub fn refresh(&self) -> Result<()> {
        let (name, dirs, layered) = {
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
            (state.tool.name.clone(), dirs, state.index.layered.clone())
        };
        let index = self.kernel().registry().layered(&dirs, &layered);
        let tool = index.find(&name)?.clone();
        let mut state = self.0.state.lock();
        state.run.tool = tool.decl.clone();
        state.run.origin = tool.origin.clone();
        state.locals.prompt = tool.prompt.clone();
        state.tool = tool;
        state.index = index;
        Ok(())
    }

    /// Makes `tools` visible to this context and what it invokes, after every tool of its
    /// search paths (the `mcp` middleware mounts a server's tools with it). Tools mounted
    /// further up stay, unless one of `tools` has their name. Refused for a context marked
    /// untrusted, like `refresh()`.
    pub fn mount(&self, tools: crate::skills::index::Layered) -> Result<()> {
        self.check_may_mount()?;
        let (dirs, inherited) = {
            let state = self.0.state.lock();
            (state.index.dirs.clone(), state.index.layered.clone())
        };
        let all: crate::skills::index::Layered = if inherited.is_empty() {
            tools
        } else {
            tools
                .iter()
                .chain(
                    inherited
                        .iter()
                        .filter(|old| !tools.iter().any(|new| new.name == old.name)),
                )
                .cloned()
                .collect()
        };
        let index = self.kernel().registry().layered(&dirs, &all);
        self.0.state.lock().index = index;
        Ok(())
    }

    /// Refuses [`Context::mount`] to a context marked untrusted (asked before anything is
    /// started for the mount).
    pub fn check_may_mount(&self) -> Result<()> {
        if self.is_untrusted() {
            return Err(crate::error::SkillError::new(
                crate::error::ErrorKind::Denied,
                "untrusted code cannot mount tools",
            ));
        }
        Ok(())
    }

    /// Picks what `next()` does now, under the lock, and moves the cursor past it.
    pub(crate) fn chain_step(&self) -> Step {
        let mut state = self.0.state.lock();
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
    pub(crate) fn settle(&self, out: Option<Arc<Value>>) {
        if let Some(value) = out {
            let mut state = self.0.state.lock();
            state.locals.result = Some(value);
            state.chain.finished = true;
        }
    }

    /// After a `$next` hook returned: a hook that did not call `next()` skipped its entry.
    pub(crate) fn drop_skipped_entry(&self, depth: usize) {
        let mut state = self.0.state.lock();
        if state.chain.pending.len() >= depth {
            state.chain.pending.truncate(depth - 1);
        }
    }

    /// The args of the entry a `$next` hook is wrapping, if it is still pending.
    pub(crate) fn pending_args(&self, name: &str) -> Arc<Value> {
        let state = self.0.state.lock();
        state
            .chain
            .pending
            .last()
            .filter(|(e, _)| *e.name == *name)
            .map_or_else(|| Arc::new(Value::Null), |(e, _)| e.args.clone())
    }

    /// Installs the resolved chain and its cascade (`run.middleware`); `quiet` drops the hooks
    /// (`nonlocals.debug = false`).
    pub(crate) fn install_chain(
        &self,
        metadata: Arc<Value>,
        entries: Arc<Vec<Entry>>,
        quiet: bool,
    ) {
        let mut state = self.0.state.lock();
        state.run.middleware = metadata;
        state.chain.entries = entries;
        if quiet {
            state.chain.invoke_hooks = Arc::default();
            state.chain.next_hooks = Arc::default();
        }
    }
}
