//! The orchestrator: the registry, globals and logs shared by every context, and the entry
//! points that start a run.
//!
//! `invoke.rs` holds the eight invocation steps, `chain.rs` the onion (`next`, `inject`, hooks),
//! `authority.rs` who an invocation runs for and with what powers (decided in steps 1 and 2).

pub mod authority;
pub mod budget;
pub mod callbacks;
pub mod chain;
pub mod invoke;
mod link;
pub mod options;
pub mod schema;
pub mod stack;
pub mod timings;
mod trace;

use std::any::{Any, TypeId};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use serde_json::{Map, Value, json};

pub use options::{ContextSeed, InvokeOptions, ToolRef};

use crate::context::log::{LogConfig, LogHub};
use crate::error::Result;
use crate::skills::loader::ScriptParser;
use crate::skills::registry::{Registry, RegistryConfig};
use crate::skills::tool::Tool;

/// Shared state of all runs in a process. Cheap to clone.
#[derive(Clone)]
pub struct Kernel(Arc<KernelInner>);

struct KernelInner {
    registry: Registry,
    globals: RwLock<Map<String, Value>>,
    logs: LogHub,
    /// The `globals.config` subset `locals.config` starts as (see `base_config()`).
    base_config: RwLock<Arc<Value>>,
    schemas: schema::SchemaCache,
    /// Services the layers above keep on the kernel (the event bus), one per type.
    extensions: Extensions,
    /// How many skill invocations deep a run may go (see `Context::depth`).
    max_depth: u32,
    /// What one run may spend, and the budgets of the runs alive now.
    budgets: budget::Budgets,
    /// Callback refs alive now (see `callbacks`).
    callbacks: Arc<callbacks::Callbacks>,
}

/// Values of any type, one per type: how the layers above the kernel (the event bus) hang their
/// services on it without the kernel naming them. Found by a `TypeId`, already a hash, so it is
/// not hashed again with SipHash: a run looks up the bus several times.
type Extensions = FxHashMap<TypeId, Box<dyn Any + Send + Sync>>;

/// Builds a kernel for a project folder.
pub struct KernelBuilder {
    config: RegistryConfig,
    natives: Vec<Tool>,
    /// Tools that ship with skillgate (registered by `crate::builtins`); natives shadow them.
    builtins: Vec<Tool>,
    log: LogConfig,
    log_capacity: usize,
    extensions: Extensions,
    max_depth: u32,
    budget: budget::BudgetLimits,
}

/// How many skill invocations deep a run may go unless configured otherwise: deep enough for
/// any honest recursion, shallow enough that a skill invoking itself without end fails fast.
pub const DEFAULT_MAX_DEPTH: u32 = 256;

impl KernelBuilder {
    /// Adds a skill folder after the ones already configured.
    pub fn skill_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.skill_dirs.push(dir.into());
        self
    }

    /// Replaces the skill folders.
    pub fn skill_dirs(mut self, dirs: Vec<PathBuf>) -> Self {
        self.config.skill_dirs = dirs;
        self
    }

    /// Registers a native tool (it shadows a built-in of the same name).
    pub fn native(mut self, tool: Tool) -> Self {
        self.natives.push(tool);
        self
    }

    /// Metadata overrides applied as the top cascade level (the command line's `--set`).
    pub fn overrides(mut self, overrides: Map<String, Value>) -> Self {
        self.config.overrides = overrides;
        self
    }

    pub fn log_config(mut self, log: LogConfig) -> Self {
        self.log = log;
        self
    }

    /// How many log events the ring buffer keeps.
    pub fn log_capacity(mut self, capacity: usize) -> Self {
        self.log_capacity = capacity;
        self
    }

    /// How many skill invocations deep a run may go (default [`DEFAULT_MAX_DEPTH`]).
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = depth.max(1);
        self
    }

    /// What one run may spend (default [`budget::BudgetLimits::default`]).
    pub fn budget(mut self, limits: budget::BudgetLimits) -> Self {
        self.budget = limits;
        self
    }

    /// Registers tools that ship with skillgate; a [`native`](Self::native) of the same name
    /// shadows one.
    pub fn builtins(mut self, tools: Vec<Tool>) -> Self {
        self.builtins.extend(tools);
        self
    }

    /// Keeps `value` on the kernel for the layers above (one value per type; a second replaces
    /// the first). Read it back with [`Kernel::extension`].
    pub fn extension<T: Any + Send + Sync>(mut self, value: Arc<T>) -> Self {
        self.extensions.insert(TypeId::of::<T>(), Box::new(value));
        self
    }

    /// Reads `.skill.js` files with `parser` (the sandbox's, installed by `crate::builtins`).
    pub fn script_parser(mut self, parser: ScriptParser) -> Self {
        self.config.scripts = Some(parser);
        self
    }

    pub fn build(self) -> Kernel {
        let natives: Vec<Arc<Tool>> = self
            .natives
            .into_iter()
            .chain(self.builtins)
            .map(Arc::new)
            .collect();
        let cwd = self.config.project_dir.display().to_string();
        let base_config = json!({
            "cwd": cwd,
            "library": "skillgate",
            "runtime": { "name": "skillgate", "version": env!("CARGO_PKG_VERSION") },
        });
        let mut globals = Map::new();
        globals.insert("config".into(), base_config.clone());
        globals.insert("tools".into(), json!({}));
        globals.insert("cache".into(), json!({}));
        Kernel(Arc::new(KernelInner {
            registry: Registry::new(self.config, natives),
            globals: RwLock::new(globals),
            logs: LogHub::new(self.log_capacity, self.log),
            base_config: RwLock::new(Arc::new(base_config)),
            schemas: schema::SchemaCache::default(),
            extensions: self.extensions,
            max_depth: self.max_depth,
            budgets: budget::Budgets::new(self.budget),
            callbacks: Arc::default(),
        }))
    }
}

impl Kernel {
    /// A bare builder for the project in `project_dir` (skills from `<project_dir>/skills`):
    /// no built-in tools, no event bus, no script engine. `crate::builtins::builder` adds what
    /// skillgate ships; the binary and the tests use that one.
    pub fn builder(project_dir: impl Into<PathBuf>) -> KernelBuilder {
        KernelBuilder {
            config: RegistryConfig::for_project(project_dir),
            natives: Vec::new(),
            builtins: Vec::new(),
            log: LogConfig::default(),
            log_capacity: 4096,
            extensions: FxHashMap::default(),
            max_depth: DEFAULT_MAX_DEPTH,
            budget: budget::BudgetLimits::default(),
        }
    }

    /// The value of type `T` kept with [`KernelBuilder::extension`], if any.
    pub fn extension<T: Any + Send + Sync>(&self) -> Option<&Arc<T>> {
        self.0
            .extensions
            .get(&TypeId::of::<T>())?
            .downcast_ref::<Arc<T>>()
    }

    pub fn registry(&self) -> &Registry {
        &self.0.registry
    }

    /// `globals`. Write through `Context::set("globals...")`, which keeps derived state fresh.
    pub(crate) fn globals(&self) -> &RwLock<Map<String, Value>> {
        &self.0.globals
    }

    pub fn logs(&self) -> &LogHub {
        &self.0.logs
    }

    /// What a new context's `locals.config` starts as: `{ cwd, library, runtime }` of
    /// `globals.config`, kept up to date by `globals_changed` so invocations only clone an `Arc`.
    pub(crate) fn base_config(&self) -> Arc<Value> {
        self.0.base_config.read().clone()
    }

    /// Called after any write to `globals`: re-reads the part of `globals.config` that new
    /// contexts start from.
    pub(crate) fn globals_changed(&self) {
        const KEYS: [&str; 3] = ["cwd", "library", "runtime"];
        let picked: Map<String, Value> = {
            let globals = self.0.globals.read();
            let config = globals.get("config");
            KEYS.iter()
                .filter_map(|k| Some(((*k).to_string(), config?.get(k)?.clone())))
                .collect()
        };
        *self.0.base_config.write() = Arc::new(Value::Object(picked));
    }

    /// How many skill invocations deep a run may go.
    pub fn max_depth(&self) -> u32 {
        self.0.max_depth
    }

    /// The budgets of the runs alive now.
    pub fn budgets(&self) -> &budget::Budgets {
        &self.0.budgets
    }

    /// Registers a callback ref: `make` builds the tool under the name it is given; the tool can
    /// be invoked by that name until the returned handle is dropped.
    pub fn callback_ref(&self, make: impl FnOnce(&str) -> Tool) -> callbacks::CallbackRef {
        self.0.callbacks.insert(make)
    }

    /// The callback `name`, if it is one and alive, with its pipeline over `index`.
    pub(crate) fn callback(
        &self,
        name: &str,
        index: &Arc<crate::skills::index::SearchIndex>,
    ) -> Option<Result<(Arc<Tool>, Arc<crate::cascade::Resolved>)>> {
        if !callbacks::is_callback(name) {
            return None;
        }
        self.0.callbacks.get(name, index)
    }

    pub(crate) fn schemas(&self) -> &schema::SchemaCache {
        &self.0.schemas
    }

    /// Starts a run: invokes `tool` as a root context (no parent, not interactive). Nothing
    /// runs until the future is awaited.
    ///
    /// Plain `fn`s returning the run's future, here and in [`Kernel::invoke_interactive`]: an
    /// `async fn` would hold its arguments beside the future it awaits, and every caller's
    /// future would carry, and move, both.
    pub fn invoke(
        &self,
        tool: impl Into<ToolRef>,
        args: impl Into<Arc<Value>>,
        options: InvokeOptions,
    ) -> impl Future<Output = Result<Option<Arc<Value>>>> + Send {
        invoke::invoke_root(self, tool.into(), args.into(), options, false)
    }

    /// Starts a run from a terminal: `run.interactive` is true for the root only.
    pub fn invoke_interactive(
        &self,
        tool: impl Into<ToolRef>,
        args: impl Into<Arc<Value>>,
        options: InvokeOptions,
    ) -> impl Future<Output = Result<Option<Arc<Value>>>> + Send {
        invoke::invoke_root(self, tool.into(), args.into(), options, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_invocations_future_holds_its_options_once() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = Kernel::builder(dir.path()).build();
        let run = kernel.invoke("missing", Value::Null, InvokeOptions::default());
        let options = std::mem::size_of::<InvokeOptions>();
        assert!(
            std::mem::size_of_val(&run) < 2 * options,
            "options of {options} bytes, a root invocation's future of {} bytes",
            std::mem::size_of_val(&run)
        );
        let ran = futures::executor::block_on(run);
        assert_eq!(
            ran.map_err(|e| e.kind()).err(),
            Some(crate::ErrorKind::NotFound)
        );
    }
}
