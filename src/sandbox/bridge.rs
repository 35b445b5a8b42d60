//! The ctx bridge, host side: the only functions a script can reach. Each takes a handle (an
//! index into this call's table of contexts: 0 is the script's own, targets are added as the
//! script asks for them) and enforces every rule itself; the JavaScript in `prelude.js` only
//! shapes these calls into the spec's `ctx` object, so code that tampers with it gains nothing.
//!
//! Once the call ends the bridge is closed: a `ctx` kept in a session's `memory` and used in a
//! later call throws instead of acting on a finished context.
//!
//! The script runs on a sandbox thread; the kernel work it starts is not part of the script's
//! task. The futures of `invoke` and `next` are spawned from the script's task, so as tasks of
//! the sandbox threads' runtime (see `pool`), and awaited through their task (aborted if the
//! script's sandbox drops the promise's future, so cancellation still reaches them, and never
//! counted as the script's running time); whatever the synchronous operations spawn lands on
//! that runtime too.
//!
//! A script has at most [`IN_FLIGHT`] invocations running at once; the ones it asks for past
//! that wait, in order, for one to end (detached ones are spawned at once). Each is resolved
//! and counted against its run's budget when the script asks for it, so a refused ref rejects
//! at once, a loop that asks for more than the budget allows fails at once instead of piling
//! up work, and what waits is a pipeline not yet started (no context, no task).
//!
//! Every argument crosses by `convert`'s rules (no cycle, at most 100 levels), and
//! `set(path, value)` also refuses a value that would sit deeper than that below the context, so
//! no script builds a JSON value deep enough to overflow the host's stack when it is read,
//! written or dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll};

use futures::FutureExt;
use futures::future::{self, BoxFuture, Either};
use parking_lot::Mutex;
use rquickjs::context::EvalOptions;
use rquickjs::function::{Async, Opt, Rest};
use rquickjs::{CatchResultExt, CaughtError, Ctx, Function, IntoJs, Object, Value as JsValue};
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::cascade::entry::parse_extra;
use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::kernel::invoke::Output;
use crate::kernel::stack::Guarded;
use crate::kernel::{InvokeOptions, ToolRef};
use crate::sandbox::convert::{
    MAX_DEPTH, caught, depth, from_js, from_js_marked, throw, to_js, to_js_opt,
};
use crate::sandbox::refs;

const VIEWS: &str = include_str!("views.js");

/// Invocations one script call has running at once (`next` and detached ones never wait here).
pub const IN_FLIGHT: usize = 64;

/// The contexts one call may act on, and whether its code is untrusted.
pub(crate) struct Bridge {
    handles: Mutex<Vec<Context>>,
    untrusted: bool,
    closed: AtomicBool,
    /// Slots for the script's invocations running now ([`IN_FLIGHT`]).
    slots: Arc<Semaphore>,
}

impl Bridge {
    pub(crate) fn new(served: Context, untrusted: bool) -> Bridge {
        Bridge {
            handles: Mutex::new(vec![served]),
            untrusted,
            closed: AtomicBool::new(false),
            slots: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }

    /// Ends the call: every handle stops working.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.handles.lock().clear();
    }

    /// The context an operation on `path` through `ctx` acts on: untrusted code's `globals` are
    /// its own, whichever handle it reads or writes them through.
    fn acting(&self, ctx: &Context, path: &str) -> Result<Context> {
        if self.untrusted && (path == "globals" || path.starts_with("globals.")) {
            self.context(0)
        } else {
            Ok(ctx.clone())
        }
    }

    fn context(&self, h: u32) -> Result<Context> {
        if self.closed.load(Ordering::Acquire) {
            return Err(ended());
        }
        self.handles
            .lock()
            .get(h as usize)
            .cloned()
            .ok_or_else(|| SkillError::failed(format!("no ctx with handle {h}")))
    }

    fn handle_of(&self, ctx: Context) -> u32 {
        let mut handles = self.handles.lock();
        let at = match handles.iter().position(|c| c.same(&ctx)) {
            Some(at) => at,
            None => {
                handles.push(ctx);
                handles.len() - 1
            }
        };
        u32::try_from(at).unwrap_or(u32::MAX)
    }
}

/// What a ctx of a sandbox call that has ended answers.
fn ended() -> SkillError {
    SkillError::failed("this ctx belongs to a sandbox call that has ended")
}

/// A synchronous bridge operation: (bridge, context, first arg, second arg) -> JSON or undefined.
type Op = fn(&Bridge, &Context, Option<Value>, Option<Value>) -> Result<Option<Value>>;

/// How an operation's arguments cross: [`from_js`], or [`from_js_marked`] for an error.
type Convert = for<'js> fn(&Ctx<'js>, JsValue<'js>) -> rquickjs::Result<Option<Value>>;

/// The host object handed to the prelude: one function per manager operation.
pub(crate) fn host<'js>(cx: &Ctx<'js>, bridge: &Arc<Bridge>) -> rquickjs::Result<Object<'js>> {
    let host = Object::new(cx.clone())?;
    let ops: [(&str, Op); 13] = [
        ("get", get),
        ("set", set),
        ("finish", finish),
        ("fail", fail),
        ("abort", abort),
        ("inject", inject),
        ("refresh", refresh),
        ("log", log),
        ("tail", tail),
        ("configure", configure),
        ("envelope", envelope),
        ("target", target),
        ("ctxTarget", ctx_target),
    ];
    for (name, op) in ops {
        // `fail` carries an error, which always crosses (see `convert`).
        let convert: Convert = if name == "fail" {
            from_js_marked
        } else {
            from_js
        };
        host.set(name, sync_fn(cx, bridge, op, convert)?)?;
    }
    host.set("invoke", invoke_fn(cx, bridge)?)?;
    host.set("next", next_fn(cx, bridge)?)?;
    host.set("views", Function::new(cx.clone(), compile_views)?)?;
    host.set("args", args_fn(cx, bridge)?)?;
    Ok(host)
}

/// `args(h)`: a deep-frozen copy of the context's args (`{}` for none).
fn args_fn<'js>(cx: &Ctx<'js>, bridge: &Arc<Bridge>) -> rquickjs::Result<Function<'js>> {
    let bridge = bridge.clone();
    Function::new(
        cx.clone(),
        move |cx: Ctx<'js>, h: u32| -> rquickjs::Result<JsValue<'js>> {
            let ctx = bridge.context(h).map_err(|e| throw(&cx, &e))?;
            let args = ctx.args();
            let value = match &*args {
                Value::Null => to_js(&cx, &json!({}))?,
                other => to_js(&cx, other)?,
            };
            let freeze: Function = cx.globals().get::<_, Object>("Object")?.get("freeze")?;
            freeze_deep(&freeze, &value)?;
            Ok(value)
        },
    )
}

fn freeze_deep<'js>(freeze: &Function<'js>, value: &JsValue<'js>) -> rquickjs::Result<()> {
    if let Some(obj) = value.as_object() {
        for item in obj.props::<String, JsValue>() {
            let (_, item) = item?;
            freeze_deep(freeze, &item)?;
        }
        freeze.call::<_, ()>((obj.clone(),))?;
    }
    Ok(())
}

/// The `console` global: `log`, `info`, `warn`, `error`, `debug` as log events of the call's
/// context (tag `console`), strings as they are and other values as JSON.
pub(crate) fn console<'js>(cx: &Ctx<'js>, bridge: &Arc<Bridge>) -> rquickjs::Result<Object<'js>> {
    let console = Object::new(cx.clone())?;
    for (name, level) in [
        ("log", "info"),
        ("info", "info"),
        ("warn", "warn"),
        ("error", "error"),
        ("debug", "debug"),
    ] {
        let bridge = bridge.clone();
        let f = Function::new(
            cx.clone(),
            move |cx: Ctx<'js>, parts: Rest<JsValue<'js>>| -> rquickjs::Result<()> {
                let mut text = Vec::with_capacity(parts.0.len());
                for part in parts.0 {
                    text.push(match from_js_marked(&cx, part)? {
                        Some(Value::String(s)) => s,
                        Some(other) => other.to_string(),
                        None => "undefined".into(),
                    });
                }
                let event = json!({
                    "type": "message",
                    "tag": "console",
                    "level": level,
                    "text": text.join(" "),
                });
                if let Ok(served) = bridge.context(0)
                    && let Some(observer) = super::observer::of(&served)
                {
                    observer.console(level, event["text"].as_str().unwrap_or_default());
                }
                match bridge.context(0).and_then(|c| c.log(event)) {
                    Ok(_) => Ok(()),
                    Err(e) => Err(throw(&cx, &e)),
                }
            },
        )?;
        console.set(name, f)?;
    }
    Ok(console)
}

/// The live views' factory (`views.js`), compiled the first time a call reads a view.
fn compile_views(cx: Ctx<'_>) -> rquickjs::Result<JsValue<'_>> {
    let mut options = EvalOptions::default();
    options.filename = Some("skillgate:views".into());
    cx.eval_with_options(VIEWS, options)
}

fn sync_fn<'js>(
    cx: &Ctx<'js>,
    bridge: &Arc<Bridge>,
    op: Op,
    convert: Convert,
) -> rquickjs::Result<Function<'js>> {
    let bridge = bridge.clone();
    Function::new(
        cx.clone(),
        move |cx: Ctx<'js>,
              h: u32,
              a: Opt<JsValue<'js>>,
              b: Opt<JsValue<'js>>|
              -> rquickjs::Result<JsValue<'js>> {
            let a = a.0.map(|v| convert(&cx, v)).transpose()?.flatten();
            let b = b.0.map(|v| convert(&cx, v)).transpose()?.flatten();
            match bridge.context(h).and_then(|c| op(&bridge, &c, a, b)) {
                Ok(v) => to_js_opt(&cx, v.as_ref()),
                Err(e) => Err(throw(&cx, &e)),
            }
        },
    )
}

fn arg<'js>(cx: &Ctx<'js>, value: Opt<JsValue<'js>>) -> rquickjs::Result<Option<Value>> {
    match value.0 {
        Some(v) => from_js(cx, v),
        None => Ok(None),
    }
}

fn path(value: Option<Value>, op: &str) -> Result<String> {
    match value {
        Some(Value::String(s)) => Ok(s),
        other => Err(SkillError::failed(format!(
            "ctx.manager.{op}(path, ...) needs a dotted path string, got {}",
            other.map_or_else(|| "undefined".into(), |v| v.to_string())
        ))),
    }
}

fn get(b: &Bridge, ctx: &Context, p: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    let p = path(p, "get")?;
    b.acting(ctx, &p)?.get(&p)
}

fn set(b: &Bridge, ctx: &Context, p: Option<Value>, v: Option<Value>) -> Result<Option<Value>> {
    let p = path(p, "set")?;
    let v = v.unwrap_or(Value::Null);
    refs::check_set(b.untrusted, &p, &v)?;
    let ctx = &b.acting(ctx, &p)?;
    // Each segment of the path is a level above the value.
    if p.split('.').count() + depth(&v) > MAX_DEPTH {
        return Err(SkillError::failed(format!(
            "ctx.manager.set(path, value) would nest the value deeper than {MAX_DEPTH} levels below the context"
        )));
    }
    ctx.set(&p, v)?;
    Ok(None)
}

fn finish(_: &Bridge, ctx: &Context, v: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    if let Some(observer) = super::observer::of(ctx) {
        observer.mark_finished();
    }
    match v {
        Some(v) => ctx.finish(v),
        // `finish()` / `finish(undefined)`: stop the chain, the result stays undefined.
        None => ctx.finish_undefined(),
    }
    Ok(None)
}

fn fail(_: &Bridge, ctx: &Context, e: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    let err = match e {
        Some(v) => SkillError::from_json(&v),
        None => SkillError::failed(format!("`{}` failed", ctx.tool_name())),
    };
    Err(ctx.fail(err))
}

fn abort(_: &Bridge, ctx: &Context, r: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    let reason = r.map(|v| match v {
        Value::String(s) => s,
        other => other.to_string(),
    });
    ctx.abort(reason.as_deref());
    Ok(None)
}

fn inject(b: &Bridge, ctx: &Context, e: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    // Entries injected into another context's chain would run as that context's (the
    // project's) code.
    if b.untrusted && !ctx.is_untrusted() {
        return Err(SkillError::new(
            ErrorKind::Denied,
            "untrusted code may only inject into its own chain",
        )
        .with_data(serde_json::json!({ "rule": "untrusted-ref" })));
    }
    let entries = parse_extra(&e.unwrap_or(Value::Null))?;
    let mut list = Vec::with_capacity(entries.len());
    for (entry, _remove) in entries {
        refs::check_ref(b.untrusted, &entry.name)?;
        list.push(entry);
    }
    ctx.inject(list)?;
    Ok(None)
}

fn refresh(b: &Bridge, ctx: &Context, _: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    refs::check_refresh(b.untrusted)?;
    ctx.refresh()?;
    Ok(None)
}

fn log(_: &Bridge, ctx: &Context, e: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    let event = ctx.log(e.unwrap_or(Value::Null))?;
    Ok(Some((*event).clone()))
}

fn tail(_: &Bridge, ctx: &Context, o: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    Ok(Some(Value::Array(ctx.tail(&o.unwrap_or(Value::Null)))))
}

fn configure(
    b: &Bridge,
    ctx: &Context,
    o: Option<Value>,
    _: Option<Value>,
) -> Result<Option<Value>> {
    let o = o.unwrap_or(Value::Null);
    // Process-wide log settings are the project's.
    if b.untrusted && o.get("global").is_some_and(|g| g == true) {
        return Err(SkillError::new(
            ErrorKind::Denied,
            "untrusted code may not change the process's log settings (`global: true`)",
        ));
    }
    ctx.configure(&o).map(Some)
}

/// `envelope` without `target` (that one is a ctx object, see `target`).
fn envelope(
    _: &Bridge,
    ctx: &Context,
    _: Option<Value>,
    _: Option<Value>,
) -> Result<Option<Value>> {
    Ok(Some(json!({
        "id": ctx.id(),
        "parent": ctx.parent().map(Context::id),
        "hasOtherTarget": ctx.has_other_target(),
    })))
}

/// The handle of `envelope.target` (the same handle when the context serves itself).
fn target(b: &Bridge, ctx: &Context, _: Option<Value>, _: Option<Value>) -> Result<Option<Value>> {
    Ok(Some(Value::from(b.handle_of(ctx.target()))))
}

/// `ctxTarget(ctx)`: the target's handle, or the error for a context that is not middleware.
fn ctx_target(
    b: &Bridge,
    ctx: &Context,
    _: Option<Value>,
    _: Option<Value>,
) -> Result<Option<Value>> {
    let target = ctx.ctx_target()?;
    Ok(Some(Value::from(b.handle_of(target))))
}

/// What an awaited bridge call settles with: a value, `undefined`, or a rejection.
struct Settled(Result<Option<Value>>);

impl<'js> IntoJs<'js> for Settled {
    fn into_js(self, cx: &Ctx<'js>) -> rquickjs::Result<JsValue<'js>> {
        match self.0 {
            Ok(v) => to_js_opt(cx, v.as_ref()),
            Err(e) => Err(throw(cx, &e)),
        }
    }
}

/// Runs a prepared kernel future (or the error that stopped its preparation) as a promise: the
/// future runs as a task of its own on the script's runtime, and is aborted if the promise's
/// future is dropped.
fn settle<F>(prepared: Result<F>) -> impl Future<Output = Settled> + use<F>
where
    F: Future<Output = Result<Option<Arc<Value>>>> + Send + 'static,
{
    // The kernel work continues the trace of the sandbox call.
    let task = prepared.map(|fut| OnWork(tokio::spawn(tracing::Instrument::in_current_span(fut))));
    async move {
        Settled(match task {
            Ok(task) => task.await.map(|out| out.map(|v| (*v).clone())),
            Err(e) => Err(e),
        })
    }
}

/// A kernel future running as a task of its own; dropping this aborts the task.
struct OnWork<T>(JoinHandle<Result<T>>);

impl<T> Future for OnWork<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<T>> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(out) => out,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => Err(SkillError::internal("the runtime is shutting down")),
        })
    }
}

impl<T> Drop for OnWork<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `invoke(ref, args?, options?)`: always a promise; a refused ref rejects it.
fn invoke_fn<'js>(cx: &Ctx<'js>, bridge: &Arc<Bridge>) -> rquickjs::Result<Function<'js>> {
    let bridge = bridge.clone();
    Function::new(
        cx.clone(),
        Async(
            move |cx: Ctx<'js>,
                  h: u32,
                  reference: Opt<JsValue<'js>>,
                  args: Opt<JsValue<'js>>,
                  options: Opt<JsValue<'js>>| {
                let prepared = prepare_invoke(&bridge, &cx, h, reference, args, options);
                match prepared {
                    // Started now while the script has a slot free, as every invocation was
                    // before there were slots.
                    Ok(Some(invoke)) => match bridge.slots.clone().try_acquire_owned() {
                        Ok(slot) => Either::Left(settle(Ok(holding(slot, invoke)))),
                        Err(_) => Either::Right(queued(bridge.clone(), invoke)),
                    },
                    Ok(None) => Either::Left(settle(Ok(future::ready(Ok(None)).boxed()))),
                    Err(e) => Either::Left(settle(Err(e))),
                }
            },
        ),
    )
}

/// An invocation's future that frees its slot when it ends.
fn holding(slot: OwnedSemaphorePermit, invoke: Guarded) -> BoxFuture<'static, Result<Output>> {
    async move {
        let out = invoke.await;
        drop(slot);
        out
    }
    .boxed()
}

/// An invocation that waits for one of the script's slots, then runs as [`settle`] runs it.
async fn queued(bridge: Arc<Bridge>, invoke: Guarded) -> Settled {
    let prepared = match bridge.slots.clone().acquire_owned().await {
        // A session's call may have ended while this one waited.
        Ok(_) if bridge.closed.load(Ordering::Acquire) => Err(ended()),
        Ok(slot) => Ok(holding(slot, invoke)),
        // The semaphore is never closed.
        Err(_) => Err(SkillError::internal("the script's slots are closed")),
    };
    settle(prepared).await
}

fn prepare_invoke<'js>(
    bridge: &Bridge,
    cx: &Ctx<'js>,
    h: u32,
    reference: Opt<JsValue<'js>>,
    args: Opt<JsValue<'js>>,
    options: Opt<JsValue<'js>>,
) -> Result<Option<Guarded>> {
    // An argument that cannot cross rejects the promise with what was thrown.
    let js = |e: CaughtError<'js>| {
        SkillError::failed(format!("ctx.manager.invoke: {}", caught(cx, e).message()))
    };
    let reference = match arg(cx, reference).catch(cx).map_err(js)? {
        Some(Value::String(s)) => s,
        other => {
            return Err(SkillError::failed(format!(
                "ctx.manager.invoke(ref, ...) needs a tool name, got {}",
                other.map_or_else(|| "undefined".into(), |v| v.to_string())
            )));
        }
    };
    refs::check_ref(bridge.untrusted, &reference)?;
    let args = arg(cx, args)
        .catch(cx)
        .map_err(js)?
        .unwrap_or_else(|| Value::Object(Default::default()));
    refs::check_args(bridge.untrusted, &args)?;
    let options = arg(cx, options).catch(cx).map_err(js)?;
    refs::check_options(bridge.untrusted, options.as_ref())?;
    let options = invoke_options(options)?;
    // Untrusted code invokes as itself whichever handle it holds (the served context's would
    // be project code, under another policy).
    let ctx = bridge.context(if bridge.untrusted { 0 } else { h })?;
    // A detached invocation is spawned right away, on the sandbox threads' runtime too. The
    // others start once the script has a slot, as tasks of that runtime.
    ctx.invoke_counted(ToolRef::Name(Arc::from(reference)), args, options)
}

/// `options` of `invoke`: `{ context: { locals, nonlocals, run, middleware }, detached }`.
fn invoke_options(value: Option<Value>) -> Result<InvokeOptions> {
    let mut options = InvokeOptions::default();
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(options);
    };
    let Value::Object(map) = value else {
        return Err(SkillError::failed(format!(
            "ctx.manager.invoke options must be an object, got {value}"
        )));
    };
    for (key, v) in map {
        match key.as_str() {
            "context" => options.context.fill_from_json(&v)?,
            "detached" => options.detached = v.as_bool().unwrap_or(false),
            other => {
                return Err(SkillError::failed(format!(
                    "ctx.manager.invoke has no option `{other}` (context, detached)"
                )));
            }
        }
    }
    Ok(options)
}

/// `next()`: a promise of `locals.result` once the rest of the chain has run.
fn next_fn<'js>(cx: &Ctx<'js>, bridge: &Arc<Bridge>) -> rquickjs::Result<Function<'js>> {
    let bridge = bridge.clone();
    Function::new(
        cx.clone(),
        Async(move |h: u32| {
            let prepared = bridge.context(h).map(|c| async move { c.next().await });
            settle(prepared)
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invoke_options_take_context_and_detached_only() {
        let o = invoke_options(Some(
            json!({"detached": true, "context": {"nonlocals": {"a": 1}}}),
        ))
        .unwrap();
        assert!(o.detached);
        assert_eq!(o.context.nonlocals["a"], 1);
        assert!(invoke_options(Some(json!({"bogus": 1}))).is_err());
        assert!(invoke_options(Some(json!(3))).is_err());
        assert!(!invoke_options(None).unwrap().detached);
    }
}
