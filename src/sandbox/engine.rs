//! Engine setup and one call: a QuickJS runtime (heap and stack limits, an interrupt handler that
//! asks the call's meter), a context with the standard intrinsics and nothing else (no module
//! loader, no timers, no I/O), and running a script in it against the served context.
//!
//! Each engine loads the prelude module once (`skillgate:prelude`, from `bytecode`) and keeps its
//! default export, the factory of a script's `ctx`, in the context's userdata. With no loader,
//! the only module a script can `import()` is that one (QuickJS looks among the loaded modules
//! first): it gets the factory, which wires a `ctx` to whatever host object it is given; the
//! host object itself is passed only by the engine and is never reachable from a script.
//!
//! A call starts the script in one locked section (the `ctx`, the code, a promise chain that ends
//! in two host callbacks writing the outcome), then drives the runtime itself, one job at a time:
//! between jobs it checks the meter (time, wall clock, abort), so an endless chain of microtasks
//! is stopped as surely as a busy loop (which the interrupt handler stops), and when only
//! promises are pending it sleeps until a bridge future, the wall-clock deadline, an abort or the
//! caller going away wakes it, so code parked on a promise that never settles ends too.
//!
//! A call runs on a sandbox thread (see `pool`); the kernel futures its bridge calls start are
//! tasks of the same runtime.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use parking_lot::Mutex;
use rquickjs::context::{EvalOptions, intrinsic};
use rquickjs::function::{Opt, This};
use rquickjs::{
    AsyncContext, AsyncRuntime, CatchResultExt, Ctx, Exception, Function, JsLifetime, Object,
    Value as JsValue,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::sandbox::bridge::{self, Bridge};
use crate::sandbox::bytecode;
use crate::sandbox::convert::{OUT_OF_MEMORY, caught, from_js, is_message, thrown, to_js};
use crate::sandbox::limits::{Limit, Limits, Meter, Metered, Stop};
use crate::sandbox::script::{Code, Script};

/// The language and nothing else: QuickJS's full set less `performance` (a high-resolution clock
/// is a timing side channel; `Date.now()` remains) and `DOMException` (a web API).
type Intrinsics = (
    intrinsic::Date,
    intrinsic::Eval,
    intrinsic::RegExpCompiler,
    intrinsic::RegExp,
    intrinsic::Json,
    intrinsic::Proxy,
    intrinsic::MapSet,
    intrinsic::TypedArrays,
    intrinsic::Promise,
    intrinsic::WeakRef,
);

/// How many queued jobs a session may still run after a stopped call before it is reset.
const DRAIN_JOBS: usize = 1000;

/// One QuickJS runtime and context. Fresh per call, or kept by a session.
pub(crate) struct Engine {
    rt: AsyncRuntime,
    cx: AsyncContext,
    /// The meter of the call in progress, read by the interrupt handler.
    meter: Arc<Mutex<Option<Arc<Meter>>>>,
}

/// The prelude's default export, the factory of a script's `ctx`, kept in the context's userdata
/// (where scripts cannot reach it).
#[derive(JsLifetime)]
struct Prelude<'js>(Function<'js>);

/// What one call runs, and against what.
pub(crate) struct Call {
    pub(crate) served: Context,
    pub(crate) script: Arc<Script>,
    pub(crate) limits: Limits,
    /// Cancelled when the caller stops waiting for the call.
    pub(crate) gone: CancellationToken,
}

/// What a call returned, and whether it was stopped from outside (time, wall clock, abort).
pub(crate) struct Ran {
    pub(crate) result: Result<Option<Value>>,
    pub(crate) stopped: bool,
}

/// How the script part of a call ended, before limits are named.
enum Failure {
    /// The script threw (or the engine refused it).
    Js(SkillError),
    /// The meter stopped it.
    Stopped,
}

/// Where the script's outcome lands (written by the host callbacks at the end of its chain).
type Outcome = Arc<Mutex<Option<Result<Option<Value>>>>>;

fn engine_error(e: rquickjs::Error) -> SkillError {
    SkillError::internal(format!("JavaScript engine: {e}"))
}

impl Engine {
    /// A new runtime and context; `memory` seeds the `memory` global (as `Object.assign`).
    pub(crate) async fn new(memory: Option<&Map<String, Value>>) -> Result<Engine> {
        let rt = AsyncRuntime::new().map_err(engine_error)?;
        let meter: Arc<Mutex<Option<Arc<Meter>>>> = Arc::default();
        let slot = meter.clone();
        rt.set_interrupt_handler(Some(Box::new(move || {
            slot.lock().as_ref().is_some_and(|m| m.should_interrupt())
        })))
        .await;
        let cx = AsyncContext::custom::<Intrinsics>(&rt)
            .await
            .map_err(engine_error)?;
        let seed = Value::Object(memory.cloned().unwrap_or_default());
        cx.with(move |cx| -> rquickjs::Result<()> {
            let value = to_js(&cx, &seed)?;
            cx.globals().set("memory", value)?;
            // A module of one function declaration: its export is bound once it is evaluated,
            // with nothing left to wait for. Loaded once per engine: a session's context would
            // keep one more module alive each call if each call loaded it.
            let (prelude, _) = bytecode::prelude().declare(&cx)?.eval()?;
            let make: Function = prelude.get("default")?;
            cx.store_userdata(Prelude(make))
                .map_err(|_| rquickjs::Error::Unknown)?;
            Ok(())
        })
        .await
        .map_err(engine_error)?;
        Ok(Engine { rt, cx, meter })
    }

    /// Runs `call.script` in this engine under `call.limits`.
    pub(crate) async fn run(&self, call: Call) -> Ran {
        let Call {
            served,
            script,
            limits,
            gone,
        } = call;
        self.rt.set_memory_limit(limits.memory).await;
        self.rt.set_max_stack_size(limits.stack).await;
        let meter = Arc::new(Meter::new(limits, served.clone(), gone));
        *self.meter.lock() = Some(meter.clone());
        let bridge = Arc::new(Bridge::new(served.clone(), script.untrusted));
        let job = Job {
            bridge: bridge.clone(),
            script,
        };
        let outcome = Metered::new(self.drive(&job, &meter), meter.clone()).await;
        bridge.close();
        let stopped = meter.stopped().is_some();
        if !stopped {
            // A stopped meter stays until `drain`, so the code it stopped cannot run on.
            *self.meter.lock() = None;
        }
        Ran {
            result: settle(outcome, &meter, &served),
            stopped,
        }
    }

    /// After a stopped call in a session: lets queued jobs run out (the meter still says stop, so
    /// running code is interrupted). True if nothing is left queued; else the session resets.
    pub(crate) async fn drain(&self) -> bool {
        for _ in 0..DRAIN_JOBS {
            match self.rt.execute_pending_job().await {
                Ok(true) | Err(_) => {}
                Ok(false) => break,
            }
        }
        let clean = !self.rt.is_job_pending().await;
        *self.meter.lock() = None;
        clean
    }

    /// Starts the script, then runs jobs until its outcome is written or the meter stops it.
    async fn drive(&self, job: &Job, meter: &Meter) -> std::result::Result<Option<Value>, Failure> {
        let outcome: Outcome = Arc::default();
        let sink = outcome.clone();
        self.cx
            .with(move |cx| job.start(cx, sink))
            .await
            .map_err(Failure::Js)?;
        let mut wall = pin!(tokio::time::sleep_until(meter.deadline.into()));
        let mut aborted = pin!(meter.served().cancelled());
        let mut gone = pin!(meter.gone().cancelled());
        loop {
            if let Some(result) = outcome.lock().take() {
                return result.map_err(Failure::Js);
            }
            if meter.should_interrupt() {
                return Err(Failure::Stopped);
            }
            match self.rt.execute_pending_job().await {
                Ok(true) | Err(_) => tokio::task::coop::consume_budget().await,
                Ok(false) => {
                    // Only promises are pending: sleep until a bridge future (whose waker is
                    // this task's), the wall clock, an abort or the caller going away wakes
                    // the task.
                    let mut slept = false;
                    let woken = poll_fn(|task| {
                        if wall.as_mut().poll(task).is_ready() {
                            meter.stop(Stop::Wall);
                            return Poll::Ready(());
                        }
                        if aborted.as_mut().poll(task).is_ready() {
                            meter.stop(Stop::Aborted);
                            return Poll::Ready(());
                        }
                        if gone.as_mut().poll(task).is_ready() {
                            meter.stop(Stop::Gone);
                            return Poll::Ready(());
                        }
                        if slept {
                            return Poll::Ready(());
                        }
                        slept = true;
                        Poll::Pending
                    });
                    woken.await;
                }
            }
        }
    }
}

/// Turns the outcome into the result, naming the limit that stopped the call if one did.
fn settle(
    outcome: std::result::Result<Option<Value>, Failure>,
    meter: &Meter,
    served: &Context,
) -> Result<Option<Value>> {
    let limits = meter.limits;
    match meter.stopped() {
        Some(Stop::Time) => return Err(limits.exceeded(Limit::Time)),
        Some(Stop::Wall) => return Err(limits.exceeded(Limit::Wall)),
        Some(Stop::Aborted) => {
            return Err(served
                .abort_error()
                .unwrap_or_else(|| SkillError::new(ErrorKind::Aborted, "aborted")));
        }
        Some(Stop::Gone) => {
            return Err(SkillError::new(
                ErrorKind::Aborted,
                "aborted: the caller stopped waiting for the sandbox call",
            ));
        }
        Some(Stop::OverBudget) => {
            if let Some(err) = served.budget().over() {
                return Err(err.clone());
            }
        }
        None => {}
    }
    match outcome {
        Ok(value) => Ok(value),
        Err(Failure::Stopped) => Err(SkillError::internal("sandbox call stopped for no reason")),
        Err(Failure::Js(err)) => {
            let limit = if is_message(&err, &[OUT_OF_MEMORY]) {
                Some(Limit::Memory)
            } else if is_message(
                &err,
                &["Maximum call stack size exceeded", "stack overflow"],
            ) {
                Some(Limit::Stack)
            } else {
                None
            };
            Err(match limit {
                Some(limit) => {
                    let e = limits.exceeded(limit);
                    match err.stack() {
                        Some(stack) => e.with_stack(stack),
                        None => e,
                    }
                }
                None => err,
            })
        }
    }
}

/// The script side of one call.
struct Job {
    bridge: Arc<Bridge>,
    script: Arc<Script>,
}

impl Job {
    /// Calls the prelude's `make` with this call's host functions, loads or compiles the code,
    /// and starts the chain `ready -> fn(ctx, ctx.args) -> outcome`.
    fn start<'js>(&self, cx: Ctx<'js>, outcome: Outcome) -> Result<()> {
        let js = |e| caught(&cx, e);
        let make = cx
            .userdata::<Prelude>()
            .map(|prelude| prelude.0.clone())
            .ok_or_else(|| SkillError::internal("the sandbox's prelude is not loaded"))?;
        let host = bridge::host(&cx, &self.bridge).catch(&cx).map_err(js)?;
        let root: Object = make.call((host,)).catch(&cx).map_err(js)?;
        let console = bridge::console(&cx, &self.bridge).catch(&cx).map_err(js)?;
        cx.globals()
            .set("console", console)
            .catch(&cx)
            .map_err(js)?;
        let origin = self.script.origin.as_str();
        let (ready, holder): (JsValue, JsValue) = match &self.script.code {
            Code::Module(compiled) => {
                let module = compiled.declare(&cx).catch(&cx).map_err(js)?;
                let (module, done) = module.eval().catch(&cx).map_err(js)?;
                let namespace = module.namespace().catch(&cx).map_err(js)?;
                (done.into_value(), namespace.into_value())
            }
            Code::Body(source) => {
                let mut options = EvalOptions::default();
                options.filename = Some(origin.to_string());
                let wrapped = format!("0, async function (ctx, args) {{{source}\n}}");
                let function: JsValue = cx
                    .eval_with_options(wrapped, options)
                    .catch(&cx)
                    .map_err(js)?;
                (JsValue::new_undefined(cx.clone()), function)
            }
        };
        let sink = outcome.clone();
        let ok = Function::new(
            cx.clone(),
            move |cx: Ctx<'js>, value: Opt<JsValue<'js>>| -> rquickjs::Result<()> {
                let value = value
                    .0
                    .unwrap_or_else(|| JsValue::new_undefined(cx.clone()));
                let json = from_js(&cx, value).catch(&cx).map_err(|e| caught(&cx, e));
                *sink.lock() = Some(json);
                Ok(())
            },
        )
        .catch(&cx)
        .map_err(js)?;
        let fail = Function::new(
            cx.clone(),
            move |cx: Ctx<'js>, reason: Opt<JsValue<'js>>| -> rquickjs::Result<()> {
                let reason = reason
                    .0
                    .unwrap_or_else(|| JsValue::new_undefined(cx.clone()));
                *outcome.lock() = Some(Err(thrown(&cx, reason)));
                Ok(())
            },
        )
        .catch(&cx)
        .map_err(js)?;
        chain(&cx, ready, holder, root, ok, fail)
            .catch(&cx)
            .map_err(js)
    }
}

/// `Promise.resolve(ready).then(() => fn(ctx, ctx.args)).then(ok, fail)`, where `fn` is the
/// function itself or a module namespace's default export.
fn chain<'js>(
    cx: &Ctx<'js>,
    ready: JsValue<'js>,
    holder: JsValue<'js>,
    root: Object<'js>,
    ok: Function<'js>,
    fail: Function<'js>,
) -> rquickjs::Result<()> {
    let run = Function::new(
        cx.clone(),
        move |cx: Ctx<'js>| -> rquickjs::Result<JsValue<'js>> {
            let function = match holder.as_object() {
                Some(ns) if !holder.is_function() => ns.get::<_, JsValue>("default")?,
                _ => holder.clone(),
            };
            let Some(function) = function.into_function() else {
                return Err(Exception::throw_type(
                    &cx,
                    "the module must `export default` a function (async function (ctx, args) { ... })",
                ));
            };
            let args: JsValue = root.get("args")?;
            function.call((root.clone(), args))
        },
    )?;
    let promise: Object = cx.globals().get("Promise")?;
    let resolve: Function = promise.get("resolve")?;
    let started: Object = resolve.call((This(promise), ready))?;
    let then: Function = started.get("then")?;
    let ran: Object = then.call((This(started), run))?;
    let then: Function = ran.get("then")?;
    then.call((This(ran), ok, fail))
}
