//! The eight invocation steps: `$NAME` extraction, lookup, child context, tool data, history,
//! authority and cascade (cached), chain, run.

use std::pin::pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cascade::entry::parse_extra;
use crate::cascade::interpolate;
use crate::cascade::{self, Entry, EntryKind, Resolved};
use crate::context::{Chain, Context, Inner, Locals, Run, State, id};
use crate::error::{ErrorKind, Result, SkillError};
use crate::kernel::Kernel;
use crate::kernel::authority::{self, Authority, Level};
use crate::kernel::link;
use crate::kernel::options::{InvokeOptions, ToolRef, extract_dollar_keys};
use crate::kernel::stack::Guarded;
use crate::kernel::trace::in_span;
use crate::skills::index::SearchIndex;
use crate::skills::patterns::ToolInfo;
use crate::skills::tool::Tool;

/// Output of an invocation: `locals.result` (`None` is undefined).
pub type Output = Option<Arc<Value>>;

impl Context {
    /// `invoke(ref, args, options)`: runs a tool in an isolated child context.
    ///
    /// Refs from a context marked untrusted must be bare tool names, and a context with an
    /// `allowed-tools` policy may only invoke what the policy admits.
    pub fn invoke(&self, tool: impl Into<ToolRef>, args: Value, options: InvokeOptions) -> Guarded {
        match self.request(tool.into(), args, options) {
            Ok(request) => Guarded::new(run(request)),
            Err(err) => Guarded::new(futures::future::ready(Err(err)).boxed()),
        }
    }

    /// `invoke` for a script's bridge, which starts what it is given when the script has a
    /// slot free: steps 1–2 now (a refused or unknown ref is an error at once, and a detached
    /// invocation is spawned, `None`), and the invocation counted against the run's budget now,
    /// so what waits for a slot is within the budget. The pipeline runs when the returned
    /// future is polled.
    pub(crate) fn invoke_counted(
        &self,
        tool: ToolRef,
        args: Value,
        options: InvokeOptions,
    ) -> Result<Option<Guarded>> {
        let Some((mut request, tool, resolved)) = steps_1_2(self.request(tool, args, options)?)?
        else {
            return Ok(None);
        };
        let seed = &request.options.context;
        if seed.target.is_none() {
            let payer = seed.parent.as_ref().unwrap_or(self);
            payer.budget().invocation(&request.args)?;
            request.counted = true;
        }
        Ok(Some(Guarded::new(
            pipeline(request, tool, resolved).boxed(),
        )))
    }

    /// The request of an invocation from this context, or why it is refused before it runs.
    fn request(&self, tool: ToolRef, args: Value, options: InvokeOptions) -> Result<Request> {
        let crate::context::seed::InvokePolicy {
            untrusted,
            allowed: policy,
            index,
        } = self.invoke_policy();
        if untrusted && !tool.is_bare_name() {
            return Err(refused(format!(
                "untrusted code may only invoke bare tool names ([a-z0-9-]); `{}` was refused",
                tool.describe()
            )));
        }
        if untrusted
            && matches!(&tool, ToolRef::Name(n) if crate::kernel::callbacks::is_callback(n))
        {
            // A callback belongs to the code that made it (an agent's hook), not to the
            // untrusted code it runs.
            return Err(refused(format!(
                "untrusted code may not invoke callback refs; `{}` was refused",
                tool.describe()
            )));
        }
        if untrusted && let Some(key) = dollar_key(&args) {
            // `$context` would let the code seed the prompt, the middleware or `nonlocals` of
            // what it invokes: options are for trusted callers.
            return Err(SkillError::new(
                ErrorKind::Denied,
                format!("untrusted code may not pass invoke options in args; `{key}` was refused"),
            )
            .with_data(serde_json::json!({ "rule": "untrusted-args", "key": key })));
        }
        let derived = self.code_authority();
        let authority = match &options.authority {
            Some(asked) => derived.at(asked.level),
            None => derived,
        };
        Ok(Request {
            kernel: self.0.kernel.clone(),
            caller: Some(self.clone()),
            index,
            tool,
            args: Arc::new(args),
            options: Box::new(options),
            interactive: false,
            policy,
            authority,
            counted: false,
        })
    }

    /// Invokes a chain entry's tool for the served context `self`, seeded with `locals` and
    /// `nonlocals` (a hook's) if given.
    pub(crate) fn invoke_entry(
        &self,
        name: Arc<str>,
        args: Arc<Value>,
        seed: Option<(Map<String, Value>, Map<String, Value>)>,
    ) -> Guarded {
        let mut options = Box::<InvokeOptions>::default();
        options.context.target = Some(self.clone());
        if let Some((locals, nonlocals)) = seed {
            options.context.locals = locals;
            options.context.nonlocals = nonlocals;
        }
        let request = Request {
            kernel: self.0.kernel.clone(),
            caller: Some(self.clone()),
            index: self.index(),
            tool: ToolRef::Name(name),
            args,
            options,
            interactive: false,
            policy: None,
            // The chain is the project's: resolved from its files and declared metadata.
            authority: self.code_authority(),
            counted: false,
        };
        Guarded::new(run(request))
    }
}

/// The first directive key at the top of `args`, if any.
fn dollar_key(args: &Value) -> Option<&str> {
    args.as_object()?
        .keys()
        .map(String::as_str)
        .find(|k| crate::kernel::options::is_directive(k))
}

/// Starts a run with no parent; nothing runs until the future is awaited. The request is
/// made here, so the future holds it alone rather than beside the arguments it was made of.
pub(crate) fn invoke_root(
    kernel: &Kernel,
    tool: ToolRef,
    args: Arc<Value>,
    options: InvokeOptions,
    interactive: bool,
) -> impl Future<Output = Result<Output>> + Send + use<> {
    let authority = options.authority.clone().unwrap_or_else(Authority::project);
    let request = Request {
        kernel: kernel.clone(),
        caller: None,
        index: kernel.registry().current(),
        tool,
        args,
        options: Box::new(options),
        interactive,
        policy: None,
        authority,
        counted: false,
    };
    async move { Guarded::new(run(request)).await }
}

struct Request {
    kernel: Kernel,
    caller: Option<Context>,
    index: Arc<SearchIndex>,
    tool: ToolRef,
    args: Arc<Value>,
    /// Boxed: a request is moved from step to step and into the pipeline's future, which is
    /// itself boxed, once per invocation and per chain entry; the options are most of its size.
    options: Box<InvokeOptions>,
    interactive: bool,
    policy: Option<Arc<crate::skills::patterns::AllowedTools>>,
    /// Who names the tool, for whom: decides step 1 and what step 2 may reach.
    authority: Authority,
    /// Counted against its run's budget already ([`Context::invoke_counted`]).
    counted: bool,
}

/// Steps 1–2, synchronously; the returned future runs the pipeline. Keeping this part out of
/// the future keeps the future small (it is boxed and moved once per invocation).
fn run(request: Request) -> BoxFuture<'static, Result<Output>> {
    match steps_1_2(request) {
        Ok(Some((request, tool, resolved))) => pipeline(request, tool, resolved).boxed(),
        Ok(None) => futures::future::ready(Ok(None)).boxed(),
        Err(err) => futures::future::ready(Err(err)).boxed(),
    }
}

/// A request whose tool is resolved: what the pipeline (steps 3–8) takes.
type Found = (Request, Arc<Tool>, Arc<Resolved>);

/// Steps 1–2 for `request`: its directive keys, then its tool (and the policy). What is left
/// is the pipeline to run, or nothing for a detached invocation (spawned here).
fn steps_1_2(mut request: Request) -> Result<Option<Found>> {
    directives(&mut request)?;
    // 2. Resolve the ref (and check the policy).
    let found = lookup(&request);
    if request.options.detached {
        detach(request, found);
        return Ok(None);
    }
    let (tool, resolved) = found?;
    Ok(Some((request, tool, resolved)))
}

/// Step 1, `$NAME` extraction: project code seeds through directive keys; below project level
/// args are data, and a directive key at any depth is refused.
fn directives(request: &mut Request) -> Result<()> {
    if request.authority.level < Level::Project {
        authority::check_data(&request.args, request.authority.level)?;
    } else if request
        .args
        .as_object()
        .is_some_and(|m| m.keys().any(|k| crate::kernel::options::is_directive(k)))
    {
        let args = (*request.args).clone();
        request.args = Arc::new(extract_dollar_keys(args, &mut request.options)?);
    }
    Ok(())
}

/// Fire and forget: no error reaches the caller, not even a failed lookup.
fn detach(mut request: Request, found: Result<(Arc<Tool>, Arc<Resolved>)>) {
    match found {
        Ok((tool, resolved)) => {
            request.options.detached = false;
            tokio::spawn(
                async move {
                    if let Err(err) = pipeline(request, tool, resolved).await {
                        tracing::debug!(error = %err, "detached invocation failed");
                    }
                }
                .in_current_span(),
            );
        }
        Err(err) => tracing::debug!(error = %err, "detached invocation failed"),
    }
}

/// Step 2: the tool `request` names, with its cached pipeline (steps 6–7), if the caller's
/// policy admits it.
fn lookup(request: &Request) -> Result<(Arc<Tool>, Arc<Resolved>)> {
    // 6–7 (authority and cascade) come cached with the index slot.
    let authority = &request.authority;
    let below = authority.level < Level::Project;
    let (tool, resolved) = match &request.tool {
        ToolRef::Name(name)
            if let Some(found) = (!below)
                .then(|| request.kernel.callback(name, &request.index))
                .flatten() =>
        {
            found?
        }
        ToolRef::Name(name) => {
            if below {
                // Missing, hidden, internal and out-of-grants tools look alike.
                authority.reach(&request.index, name)?;
            }
            let slot = request.index.find_slot(name)?;
            let resolved = slot
                .resolved
                .get_or_init(|| cascade::resolve_uncached(&request.index, &slot.tool).map(Arc::new))
                .clone()?;
            (slot.tool.clone(), resolved)
        }
        ToolRef::Def(tool) => {
            if below && !authority.may_name(tool) {
                return Err(SkillError::new(
                    ErrorKind::NotFound,
                    format!("no skill named `{}`", tool.name),
                )
                .with_data(serde_json::json!({ "rule": "unreachable", "skill": tool.name })));
            }
            (tool.clone(), cascade::resolved_for(&request.index, tool)?)
        }
    };
    authority.check_class(&tool)?;
    if let Some(policy) = &request.policy
        && !policy.is_empty()
    {
        let info = ToolInfo {
            name: &tool.name,
            tags: &tool.tags,
        };
        policy
            .check(info, &request.args)
            .map_err(|d| SkillError::new(ErrorKind::Denied, d.message))?;
    }
    Ok((tool, resolved))
}

/// Steps 3–8 for a resolved tool; the caller's signal, if any, linked to the context while the
/// chain runs.
async fn pipeline(request: Request, tool: Arc<Tool>, resolved: Arc<Resolved>) -> Result<Output> {
    let (ctx, signal) = prepare(request, tool, &resolved)?;
    // One span per invocation; chain entries get theirs in `chain::run_entry`.
    let outcome = if ctx.has_other_target() {
        let run = pin!(ctx.next());
        link::watch(&ctx, signal, run).await
    } else {
        // See `kernel::trace`.
        let span = tracing::debug_span!(
            "invoke",
            otel.name = ctx.tool_name(),
            skill = ctx.tool_name(),
            context_id = tracing::field::Empty,
        );
        if !span.is_disabled() {
            span.record("context_id", ctx.id());
        }
        let run = pin!(in_span(span, ctx.next()));
        link::watch(&ctx, signal, run).await
    };
    match outcome {
        Ok(_) if ctx.has_other_target() => Ok(ctx.result()),
        Ok(_) => {
            let result = ctx.result();
            if let Some(value) = &result {
                ctx.budget()
                    .produced(value)
                    .map_err(|e| e.with_tool(ctx.tool_name()))?;
            }
            Ok(result)
        }
        Err(err) => {
            let err = if err.tool().is_none() {
                err.with_tool(ctx.tool_name())
            } else {
                err
            };
            ctx.record_first_error(&err);
            Err(err)
        }
    }
}

/// Steps 3–5 and 8: the child context with the tool's data, a history frame, the seed and the
/// chain; the seed's signal is handed back for the run to watch (`kernel::link`).
fn prepare(
    request: Request,
    tool: Arc<Tool>,
    resolved: &Resolved,
) -> Result<(Context, Option<CancellationToken>)> {
    let Request {
        kernel,
        caller,
        index,
        args,
        options,
        interactive,
        authority,
        counted,
        ..
    } = request;
    // Taken field by field from the boxed options rather than moved out whole.
    let mut options = options;
    let seed = &mut options.context;
    let parent = seed.parent.take().or(caller);
    let depth = match (&seed.target, &parent) {
        (Some(served), _) => served.depth(),
        (None, Some(parent)) => parent.depth() + 1,
        (None, None) => seed.depth.unwrap_or(0) + 1,
    };
    if depth > kernel.max_depth() {
        return Err(too_deep(kernel.max_depth(), parent.as_ref(), &tool.name));
    }
    let budget = match &parent {
        Some(p) => p.budget().clone(),
        None => kernel.budgets().join_or_new(seed.budget),
    };
    // Chain entries are layers of an invocation already counted; one counted when it was
    // asked for still does not start once its run is over budget.
    if counted {
        if let Some(err) = budget.over() {
            return Err(err.clone());
        }
    } else if seed.target.is_none() {
        budget.invocation(&args)?;
    }
    // A root's nonlocals are its seed's (with the kernel's `rootContextId`), taken whole
    // rather than added key by key to a map of their own, hashing each key again.
    let root_nonlocals = parent
        .is_none()
        .then(|| std::mem::take(&mut seed.nonlocals));
    let birth = Birth {
        budget,
        id: seed.id,
        root_nonlocals,
        depth,
        parent,
        target: seed.target.take(),
        index,
        tool,
        args,
        interactive,
        authority,
    };
    let ctx = create(&kernel, birth, resolved);
    if !(seed.locals.is_empty() && seed.nonlocals.is_empty() && seed.run.is_empty()) {
        apply_seed(
            &ctx,
            std::mem::take(&mut seed.locals),
            std::mem::take(&mut seed.nonlocals),
            std::mem::take(&mut seed.run),
        )?;
    }
    for (path, value) in seed.extensions.drain(..) {
        ctx.set_extension(path, value);
    }
    // 8. The chain (in place from the cache unless something adjusts it).
    adjust_chain(&ctx, resolved)?;
    Ok((ctx, seed.signal.take()))
}

/// What a new context is made from.
struct Birth {
    budget: Arc<crate::kernel::budget::Budget>,
    id: Option<u64>,
    /// For a root: the nonlocals its seed gives.
    root_nonlocals: Option<Map<String, Value>>,
    depth: u32,
    parent: Option<Context>,
    target: Option<Context>,
    index: Arc<SearchIndex>,
    tool: Arc<Tool>,
    args: Arc<Value>,
    interactive: bool,
    authority: Authority,
}

fn create(kernel: &Kernel, birth: Birth, resolved: &Resolved) -> Context {
    let Birth {
        budget,
        id,
        root_nonlocals,
        depth,
        parent,
        target,
        index,
        tool,
        args,
        interactive,
        authority,
    } = birth;
    // A root's id is its run's `rootContextId`, needed now; other ids are made on first use.
    let id = match (&parent, id) {
        (None, None) => Some(id::next_id()),
        (_, id) => id,
    };
    let root = match &parent {
        Some(p) => p.0.root,
        None => id.unwrap_or_default(),
    };
    let nonlocals = match &parent {
        Some(p) => p.nonlocals_shared(),
        None => {
            // First, and the kernel's whatever the seed says (as `merge_nonlocals` keeps it).
            let mut map = root_nonlocals.unwrap_or_default();
            map.shift_insert(0, "rootContextId".into(), Value::String(id::format(root)));
            Arc::new(map)
        }
    };
    let state = State {
        index,
        locals: Locals {
            result: None,
            error: None,
            pushed: Vec::new(),
            config: kernel.base_config(),
            prompt: tool.prompt.clone(),
            untrusted_ref: false,
            allowed_tools: None,
            internals: None,
            other: None,
        },
        nonlocals,
        run: Run {
            origin: tool.origin.clone(),
            middleware: resolved.metadata.clone(),
            tool: tool.decl.clone(),
        },
        chain: Chain {
            entries: resolved.entries.clone(),
            pos: 0,
            finished: false,
            invoke_hooks: resolved.invoke_hooks.clone(),
            invoke_pos: 0,
            next_hooks: resolved.next_hooks.clone(),
            pending: Vec::new(),
        },
        extensions: Vec::new(),
        own_globals: None,
        tool: tool.clone(),
    };
    Context(Arc::new(Inner {
        id: id.map_or_else(OnceLock::new, OnceLock::from),
        created_for: tool,
        target,
        parent,
        args,
        started: id::now_ms(),
        interactive,
        depth,
        authority,
        budget,
        root,
        kernel: kernel.clone(),
        aborted: AtomicBool::new(false),
        abort_reason: OnceLock::new(),
        token: OnceLock::new(),
        state: Mutex::new(state),
    }))
}

/// The error for an invocation past `max` levels: names the chain of skills that led there,
/// root first, runs of one name collapsed (`hello ×255 → hello`).
fn too_deep(max: u32, parent: Option<&Context>, tool: &str) -> SkillError {
    let mut names = vec![tool.to_string()];
    let mut at = parent;
    while let Some(ctx) = at {
        if !ctx.has_other_target() {
            names.push(ctx.tool_name().to_string());
        }
        at = ctx.parent();
    }
    names.reverse();
    let mut runs: Vec<(String, usize)> = Vec::new();
    for name in names {
        match runs.last_mut() {
            Some((last, count)) if *last == name => *count += 1,
            _ => runs.push((name, 1)),
        }
    }
    let chain = runs
        .iter()
        .map(|(name, n)| match n {
            1 => name.clone(),
            n => format!("{name} ×{n}"),
        })
        .collect::<Vec<_>>()
        .join(" → ");
    SkillError::new(
        ErrorKind::Failed,
        format!(
            "invocation depth limit of {max} reached: {chain}; a skill that invokes itself without end, or raise `--max-depth`"
        ),
    )
    .with_data(serde_json::json!({ "limit": "depth", "maxDepth": max, "chain": runs.iter().map(|(n, c)| serde_json::json!({"skill": n, "times": c})).collect::<Vec<_>>() }))
}

/// Overlays the seed's locals, nonlocals and run onto the new context.
fn apply_seed(
    ctx: &Context,
    locals: Map<String, Value>,
    nonlocals: Map<String, Value>,
    run: Map<String, Value>,
) -> Result<()> {
    ctx.merge_nonlocals(nonlocals);
    for (key, value) in locals {
        match (key.as_str(), value) {
            ("internals", Value::Object(fields)) => {
                for (k, v) in fields {
                    ctx.set(&format!("locals.internals.{k}"), v)?;
                }
            }
            ("config", Value::Object(fields)) => ctx.extend_config(fields),
            (_, value) => ctx.set(&format!("locals.{key}"), value)?,
        }
    }
    for (key, value) in run {
        ctx.set(&format!("run.{key}"), value)?;
    }
    Ok(())
}

/// Step 8 adjustments to the cached chain: hooks silenced by `nonlocals.debug = false`,
/// context variables interpolated, extra middleware from the seed or inherited nonlocals.
fn adjust_chain(ctx: &Context, resolved: &Resolved) -> Result<()> {
    let (extra_local, extra_inherited, debug_off) = ctx.chain_adjustments();
    let hooked = !resolved.invoke_hooks.is_empty() || !resolved.next_hooks.is_empty();
    let quiet = hooked && debug_off;
    if !resolved.dynamic && extra_local.is_none() && extra_inherited.is_none() && !quiet {
        return Ok(());
    }
    let mut metadata = resolved.metadata.clone();
    let mut entries = resolved.entries.clone();
    if resolved.dynamic {
        let mut value = (*metadata).clone();
        interpolate::context_pass(&mut value, &|path| ctx.get(path).ok().flatten());
        let mut list = (*entries).clone();
        for entry in list
            .iter_mut()
            .filter(|e| matches!(e.kind, EntryKind::Tool))
        {
            if let Some(v) = value.get(&*entry.name) {
                entry.args = Arc::new(v.clone());
            }
        }
        metadata = Arc::new(value);
        entries = Arc::new(list);
    }
    if extra_local.is_some() || extra_inherited.is_some() {
        let mut list = (*entries).clone();
        for extra in [extra_inherited, extra_local].into_iter().flatten() {
            apply_extra(&mut list, &extra)?;
        }
        entries = Arc::new(crate::cascade::order::sort(list)?);
    }
    ctx.install_chain(metadata, entries, quiet);
    Ok(())
}

/// Override (same name), remove (`remove: true`) or append (new name) extra middleware.
fn apply_extra(list: &mut Vec<Entry>, extra: &Value) -> Result<()> {
    for (entry, remove) in parse_extra(extra)? {
        let existing = list
            .iter()
            // The tool's own body entry bears the tool's name but is not a cascade entry.
            .position(|e| {
                e.name == entry.name && !e.is_sentinel() && !matches!(e.kind, EntryKind::Body)
            });
        match (existing, remove) {
            (Some(i), true) => {
                list.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                let original = &list[i];
                let replaced = Entry {
                    before: if entry.has_constraints() {
                        entry.before.clone()
                    } else {
                        original.before.clone()
                    },
                    after: if entry.has_constraints() {
                        entry.after.clone()
                    } else {
                        original.after.clone()
                    },
                    ..entry
                };
                list[i] = replaced;
            }
            (None, false) => {
                let entry = if entry.has_constraints() {
                    entry
                } else {
                    entry.with_default_order()
                };
                list.push(entry);
            }
        }
    }
    Ok(())
}

/// An invocation untrusted code may not make, refused before it runs.
fn refused(message: String) -> SkillError {
    SkillError::new(ErrorKind::Denied, message)
}
