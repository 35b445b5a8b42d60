//! The context of one invocation: envelope, args, locals, nonlocals, globals, run, and the manager
//! operations on them.
//!
//! A `Context` is a cheap handle (`Arc` inside). Immutable parts (id, parent, target, args,
//! interactive, signal wiring) sit outside the lock; mutable parts sit in one `State` behind a
//! mutex that is never held across an `await`. JSON parts that are shared between contexts
//! (nonlocals, `run.tool`, `locals.config`, `locals.prompt`) are `Arc`s copied on write, which is
//! how nonlocals are "shallow-copied parent to child" without copying anything until a write.

pub mod abort;
pub mod access;
pub(crate) mod chain;
pub mod deadline;
pub mod history;
pub mod id;
pub mod log;
pub mod path;
pub(crate) mod seed;
pub mod serialize;
pub mod shape;
pub mod tap;

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorKind, Result, SkillError};
use crate::kernel::Kernel;
use crate::skills::index::SearchIndex;
use crate::skills::patterns::AllowedTools;
use crate::skills::tool::Tool;

pub(crate) use chain::Chain;
pub use history::Frame;

/// Handle to one invocation's context. Cloning shares it.
#[derive(Clone)]
pub struct Context(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    /// Made on first use for contexts below the root (most never show theirs), at birth for a
    /// root (its id is the run's `rootContextId`).
    pub(crate) id: OnceLock<u64>,
    /// The tool this context was created for (its name never changes; `refresh` may swap the
    /// definition in `State::tool`).
    pub(crate) created_for: Arc<Tool>,
    pub(crate) parent: Option<Context>,
    /// The served context for chain entries; `None` means the context serves itself.
    pub(crate) target: Option<Context>,
    pub(crate) args: Arc<Value>,
    /// `Date.now()` when the invocation started (the history frame's timestamp).
    pub(crate) started: u64,
    pub(crate) interactive: bool,
    /// How many skill invocations deep this context is (1 for a root; chain entries share the
    /// depth of the context they serve). Bounded by the kernel's `max_depth`.
    pub(crate) depth: u32,
    /// Who named this invocation, for whom (see `kernel::authority`).
    pub(crate) authority: crate::kernel::authority::Authority,
    /// What the run this context belongs to may still spend (shared by the whole run).
    pub(crate) budget: Arc<crate::kernel::budget::Budget>,
    /// The id of the run's root context (this one's for a root): per-run log settings are kept
    /// under it, never under the `rootContextId` in `nonlocals`, which code can write.
    pub(crate) root: u64,
    pub(crate) kernel: Kernel,
    pub(crate) aborted: AtomicBool,
    pub(crate) abort_reason: OnceLock<String>,
    pub(crate) token: OnceLock<CancellationToken>,
    pub(crate) state: Mutex<State>,
}

impl Drop for Inner {
    /// A run's per-run log settings go with its root context, however the run ended (finished,
    /// failed, or dropped by a timeout or a client that went away).
    fn drop(&mut self) {
        if self.parent.is_none()
            && let Some(id) = self.id.get()
        {
            self.kernel.logs().end_run(*id);
        }
    }
}

/// Everything mutable about a context.
pub(crate) struct State {
    /// The internal tool definition (`refresh` replaces it).
    pub(crate) tool: Arc<Tool>,
    /// Where `invoke` from this context looks tools up.
    pub(crate) index: Arc<SearchIndex>,
    pub(crate) locals: Locals,
    pub(crate) nonlocals: Arc<Map<String, Value>>,
    pub(crate) run: Run,
    pub(crate) chain: Chain,
    /// Values that are not JSON (connections, response handles), by dotted path. A context has
    /// a few at most (a run's reply, deadline and record handles): a list searched in order
    /// costs less than hashing a path for every insert and lookup.
    pub(crate) extensions: Vec<(Cow<'static, str>, Arc<dyn Any + Send + Sync>)>,
    /// The `globals` of untrusted code running in this context: its own, made on first use
    /// from the process's `config`, so what it writes never reaches another request. Boxed:
    /// most contexts never have one, and every context is moved whole when it is made.
    pub(crate) own_globals: Option<Box<Map<String, Value>>>,
}

pub(crate) struct Locals {
    pub(crate) result: Option<Arc<Value>>,
    pub(crate) error: Option<SkillError>,
    /// Frames pushed with `push_history` (the rest of the stack is read off the parents).
    pub(crate) pushed: Vec<Frame>,
    pub(crate) config: Arc<Value>,
    pub(crate) prompt: Option<Arc<Value>>,
    /// Per-invocation flags that never pass to children.
    pub(crate) untrusted_ref: bool,
    pub(crate) allowed_tools: Option<Arc<AllowedTools>>,
    /// `locals.internals`, made when first written (like `other`: most contexts never have
    /// one, and every context is moved whole when it is made).
    pub(crate) internals: Option<Box<Map<String, Value>>>,
    /// Every other key middleware put on locals, made when first written.
    pub(crate) other: Option<Box<Map<String, Value>>>,
}

pub(crate) struct Run {
    pub(crate) origin: Arc<Value>,
    pub(crate) middleware: Arc<Value>,
    pub(crate) tool: Arc<Value>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.id())
            .field("tool", &self.tool_name())
            .finish()
    }
}

impl Context {
    /// `envelope.id`.
    pub fn id(&self) -> String {
        id::format(self.raw_id())
    }

    /// How many skill invocations deep this context is: 1 for a root (or one more than the run
    /// whose event started it), one more for each skill invoked below; middleware entries share
    /// the depth of the skill they serve.
    pub fn depth(&self) -> u32 {
        self.0.depth
    }

    /// The budget of the run this context belongs to.
    pub fn budget(&self) -> &Arc<crate::kernel::budget::Budget> {
        &self.0.budget
    }

    /// The numeric id (see [`Context::id`]).
    pub(crate) fn raw_id(&self) -> u64 {
        *self.0.id.get_or_init(id::next_id)
    }

    /// `envelope.parent`.
    pub fn parent(&self) -> Option<&Context> {
        self.0.parent.as_ref()
    }

    /// `envelope.target`: the served context for middleware, else this context.
    pub fn target(&self) -> Context {
        self.0.target.clone().unwrap_or_else(|| self.clone())
    }

    /// `envelope.hasOtherTarget`.
    pub fn has_other_target(&self) -> bool {
        self.0.target.is_some()
    }

    /// `ctxTarget(ctx)`: the served context, or an error if this context is not middleware.
    pub fn ctx_target(&self) -> Result<Context> {
        self.0.target.clone().ok_or_else(|| {
            SkillError::failed(format!(
                "`{}` was not invoked as middleware: its target is itself",
                self.tool_name()
            ))
        })
    }

    /// `args`, as given at invocation (set once).
    pub fn args(&self) -> Arc<Value> {
        self.0.args.clone()
    }

    /// `run.interactive`.
    pub fn interactive(&self) -> bool {
        self.0.interactive
    }

    pub fn kernel(&self) -> &Kernel {
        &self.0.kernel
    }

    pub fn tool(&self) -> Arc<Tool> {
        self.0.state.lock().tool.clone()
    }

    pub fn tool_name(&self) -> &str {
        &self.0.created_for.name
    }

    pub fn same(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The id of the run's root context: what `nonlocals.rootContextId` starts as. Log events,
    /// bus events and the streams that follow a run are correlated by this id, never by the
    /// `nonlocals` copy, which code may overwrite.
    pub fn root_id(&self) -> String {
        id::format(self.0.root)
    }

    /// `locals.result` (`None` is undefined).
    pub fn result(&self) -> Option<Arc<Value>> {
        self.0.state.lock().locals.result.clone()
    }

    /// Sets `locals.result` without finishing the chain.
    pub fn set_result(&self, value: Option<Value>) {
        self.0.state.lock().locals.result = value.map(Arc::new);
    }

    /// `locals.error`.
    pub fn error(&self) -> Option<SkillError> {
        self.0.state.lock().locals.error.clone()
    }

    /// `finish(value)`: sets the result and stops the chain.
    pub fn finish(&self, value: Value) {
        let mut state = self.0.state.lock();
        state.locals.result = Some(Arc::new(value));
        state.chain.finished = true;
    }

    /// `finish()` with no value: stops the chain, `locals.result` stays undefined.
    pub fn finish_undefined(&self) {
        let mut state = self.0.state.lock();
        state.locals.result = None;
        state.chain.finished = true;
    }

    /// One key of this context's resolved cascade (`run.middleware[key]`), if set.
    pub fn metadata(&self, key: &str) -> Option<Value> {
        self.0.state.lock().run.middleware.get(key).cloned()
    }

    /// True when this context's tool is a markdown template (no code of its own).
    pub fn is_template(&self) -> bool {
        matches!(
            self.0.state.lock().tool.body,
            crate::skills::tool::Body::Template
        )
    }

    /// `fail(error)`: records `locals.error` and returns the error to propagate with `?`/`Err`.
    pub fn fail(&self, error: impl Into<SkillError>) -> SkillError {
        let error = error.into();
        self.0.state.lock().locals.error = Some(error.clone());
        error
    }

    /// True once the chain stopped (a result was returned or `finish` was called).
    pub fn is_finished(&self) -> bool {
        self.0.state.lock().chain.finished
    }

    /// Appends a frame to `locals.history` (the only write history allows).
    pub fn push_history(&self, tool: &str, args: Value) {
        self.0.state.lock().locals.pushed.push(Frame {
            tool: Arc::from(tool),
            args: Arc::new(args),
            timestamp: id::now_ms(),
        });
    }

    /// `locals.prompt.expanded`, if the tool has a prompt.
    pub fn prompt_expanded(&self) -> Option<String> {
        let state = self.0.state.lock();
        state
            .locals
            .prompt
            .as_ref()
            .and_then(|p| p.get("expanded"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// Replaces the first `placeholder` in `locals.prompt.expanded` with `text`, in place: no
    /// copy of the prompt is made (or kept while later middleware runs), so a prompt with N
    /// directives costs memory linear in its size. False when there is no such prompt text.
    pub fn fill_prompt(&self, placeholder: &str, text: &str) -> bool {
        let mut state = self.0.state.lock();
        let Some(prompt) = state.locals.prompt.as_mut() else {
            return false;
        };
        let Some(Value::String(expanded)) = Arc::make_mut(prompt).get_mut("expanded") else {
            return false;
        };
        if let Some(at) = expanded.find(placeholder) {
            expanded.replace_range(at..at + placeholder.len(), text);
        }
        true
    }

    /// The search index lookups from this context use.
    pub fn index(&self) -> Arc<SearchIndex> {
        self.0.state.lock().index.clone()
    }

    /// The authority this invocation was named under: the level of the code or request that
    /// named it, and the principal it runs for. A native tool acting on refs or data from its
    /// args decides by it.
    pub fn authority(&self) -> &crate::kernel::authority::Authority {
        &self.0.authority
    }

    /// The authority of what this context's own code invokes: untrusted while its code is marked
    /// untrusted, else project level (skill files and native tools are the project's code), for
    /// the same principal.
    pub fn code_authority(&self) -> crate::kernel::authority::Authority {
        use crate::kernel::authority::{Authority, Level};
        let level = if self.is_untrusted() {
            Level::Untrusted
        } else {
            Level::Project
        };
        Authority {
            level,
            principal: self.0.authority.principal.clone(),
        }
    }

    /// Marks this context's own `invoke` calls as untrusted: only bare tool names pass.
    pub fn mark_untrusted(&self) {
        self.0.state.lock().locals.untrusted_ref = true;
    }

    /// Whether this context's own `invoke` calls are marked untrusted.
    pub fn is_untrusted(&self) -> bool {
        self.0.state.lock().locals.untrusted_ref
    }

    /// Installs the `allowed-tools` policy checked on every `invoke` from this context.
    pub fn restrict_tools(&self, policy: Option<Arc<AllowedTools>>) {
        self.0.state.lock().locals.allowed_tools = policy;
    }

    /// Stores a non-JSON value at a path; it serializes as absent.
    pub fn set_extension(
        &self,
        path: impl Into<Cow<'static, str>>,
        value: Arc<dyn Any + Send + Sync>,
    ) {
        let path = path.into();
        let extensions = &mut self.0.state.lock().extensions;
        match extensions.iter_mut().find(|(p, _)| *p == path) {
            Some((_, held)) => *held = value,
            None => extensions.push((path, value)),
        }
    }

    /// A non-JSON value stored at `path` here or, for `nonlocals.*` paths, on an ancestor.
    pub fn extension<T: Any + Send + Sync>(&self, path: &str) -> Option<Arc<T>> {
        let mut ctx = Some(self);
        while let Some(c) = ctx {
            let found =
                c.0.state
                    .lock()
                    .extensions
                    .iter()
                    .find(|(p, _)| p == path)
                    .map(|(_, value)| value.clone());
            if let Some(value) = found {
                return value.downcast::<T>().ok();
            }
            if !path.starts_with("nonlocals.") {
                return None;
            }
            ctx = c.parent();
        }
        None
    }

    /// Emits a log event stamped with this run's `rootContextId` (`log(event)`).
    pub fn log(&self, event: impl Into<Value>) -> Result<Arc<Value>> {
        let mut stamp = Map::new();
        stamp.insert("rootContextId".into(), Value::String(self.root_id()));
        // A run started by a gateway carries its request id into every log event.
        let request_id = self
            .0
            .state
            .lock()
            .nonlocals
            .get("request")
            .and_then(|r| r.get("id"))
            .cloned();
        if let Some(id) = request_id {
            stamp.insert("requestId".into(), id);
        }
        stamp.insert("contextId".into(), Value::String(self.id()));
        stamp.insert("tool".into(), Value::String(self.tool_name().to_string()));
        stamp.insert("timestamp".into(), Value::from(id::now_ms()));
        let event = self
            .0
            .kernel
            .logs()
            .log(self.0.root, &event.into(), stamp)?;
        if let Some(run) = crate::kernel::timings::of(self) {
            run.log(&event);
        }
        Ok(event)
    }

    /// Recent log events of this run (`tail(opts)`).
    pub fn tail(&self, opts: &Value) -> Vec<Value> {
        self.0.kernel.logs().tail(&self.root_id(), opts)
    }

    /// Reads or changes log settings for this run, or globally (`configure(opts)`).
    pub fn configure(&self, opts: &Value) -> Result<Value> {
        self.0.kernel.logs().configure(self.0.root, opts)
    }

    pub(crate) fn immutable(what: &str) -> SkillError {
        SkillError::new(ErrorKind::Immutable, what.to_string())
    }
}
