//! Steps 2 to 5 that every transport shares: fill `nonlocals.request` and `nonlocals.gateway`,
//! announce `gateway-message`, invoke the routed skill through the full pipeline, and deliver
//! what the run sends back through the reply channel. Step 1 (verify) is the transport's.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::context::deadline::{DEADLINE_PATH, Deadline};
use crate::context::id;
use crate::context::shape::Shape;
use crate::context::tap::Tap;
use crate::error::{ErrorKind, Result, SkillError};
use crate::events::Event;
use crate::events::KernelBus;
use crate::events::runs::RunRecord;
use crate::gateway::admission::Admission;
use crate::gateway::metrics::Metrics;
use crate::gateway::reply::{RESPONSE_PATH, Reply, ReplyPart, ReplyParts};
use crate::kernel::authority::Level;
use crate::kernel::timings::{EntryTimes, RECORD_PATH, timed};
use crate::kernel::{InvokeOptions, Kernel, ToolRef};
use crate::skills::tool::Tool;

/// A verified inbound message, routed to a skill.
#[derive(Debug)]
pub struct Inbound {
    /// `http`, `websocket`, `webhook`, `slack`, `email`.
    pub transport: &'static str,
    /// The routed skill.
    pub skill: ToolRef,
    /// The routed skill as the door found it when it checked the caller's reach, if it did:
    /// the runs record reads the params schema it redacts by from it instead of looking the
    /// skill up again. The run itself still names `skill` to the kernel.
    pub tool: Option<Arc<Tool>>,
    /// Who names it, for whom: the caller's own authority when the caller named the skill, the
    /// project's serving the caller when a route the project declared chose it.
    pub authority: crate::kernel::authority::Authority,
    pub args: Value,
    /// Parsed request fields for `nonlocals.request` (the id and the raw handle are added).
    pub request: Map<String, Value>,
    pub request_id: String,
    /// Where a reply goes (`nonlocals.gateway.replyTo`): a channel and thread, an address.
    pub reply_to: Value,
    /// `gateway-message` event data; `None` emits no event (the spec's list of transports that
    /// announce messages does not include HTTP requests).
    pub announce: Option<Value>,
    /// Forward the run's log events and bus events as reply parts (streaming clients).
    pub follow: bool,
    /// Abort the run after this long.
    pub timeout: Option<Duration>,
    /// The client can send the run messages (`gateway-receive`): [`Dispatch::inbox`] takes them.
    pub duplex: bool,
    /// The conversation this message belongs to (`nonlocals.gateway.sessionId`): a chat thread,
    /// a mail thread; follow-ups in it share it.
    pub session: Option<String>,
    /// The address of the client that asked, on doors a client connects to (HTTP, WebSocket,
    /// MCP): its runs count against its share of the runs at once (`admission.rs`).
    pub client: Option<std::net::IpAddr>,
}

impl Inbound {
    /// A plain call of `skill` from `transport`: no request fields, no reply address, no
    /// announcement, no stream, no conversation.
    pub fn call(
        transport: &'static str,
        skill: &str,
        authority: crate::kernel::authority::Authority,
        args: Value,
        timeout: Duration,
    ) -> Inbound {
        Inbound {
            transport,
            skill: ToolRef::Name(Arc::from(skill)),
            tool: None,
            authority,
            args,
            request: Map::new(),
            request_id: id::format(id::next_id()),
            reply_to: Value::Null,
            announce: None,
            follow: false,
            timeout: Some(timeout),
            duplex: false,
            session: None,
            client: None,
        }
    }
}

/// A running dispatch: read `parts` until [`ReplyPart::Done`]. Dropping it aborts the run
/// (the client went away).
#[derive(Debug)]
pub struct Dispatch {
    pub parts: ReplyParts,
    /// `nonlocals.rootContextId` of the run.
    pub root_id: String,
    pub reply: Arc<Reply>,
    /// Where the transport puts the client's messages to the run (duplex transports).
    pub inbox: Option<crate::gateway::reply::Inbox>,
    _abort: DropGuard,
}

/// What every transport holds: the kernel, the shared metrics, and the switch that aborts
/// every run when a shutdown's grace period runs out.
#[derive(Clone)]
pub struct Gateway {
    pub kernel: Kernel,
    pub metrics: Arc<Metrics>,
    /// Each transport's state, for `/readyz`.
    pub readiness: crate::gateway::transport::Readiness,
    /// Behind an `Arc`: cloning a token itself takes its tree's lock, and every run clones
    /// the gateway.
    halt: Arc<CancellationToken>,
    /// Runs that may go at once and bytes of their args, every door together, with the reserve
    /// kept for clients running next to nothing (`admission.rs`).
    admission: Arc<Admission>,
}

pub use crate::gateway::admission::{DEFAULT_MAX_ARG_BYTES, DEFAULT_MAX_RUNS};

impl Gateway {
    pub fn new(kernel: Kernel, metrics: Arc<Metrics>) -> Gateway {
        Gateway {
            kernel,
            metrics,
            readiness: Default::default(),
            halt: Arc::new(CancellationToken::new()),
            admission: Admission::new(DEFAULT_MAX_RUNS, DEFAULT_MAX_ARG_BYTES),
        }
    }

    /// This gateway taking at most `max_runs` runs at once (`--max-runs`) and `max_arg_bytes`
    /// bytes of their args (`--max-args-in-flight`).
    pub fn with_run_bounds(mut self, max_runs: usize, max_arg_bytes: usize) -> Gateway {
        self.admission = Admission::new(max_runs, max_arg_bytes);
        self
    }

    /// Runs going now, every door together.
    pub fn runs_now(&self) -> usize {
        self.admission.runs_now()
    }

    /// Aborts every run in progress and every run started from now on.
    pub fn halt(&self) {
        self.halt.cancel();
    }

    /// Starts the run for `inbound` on a task of its own.
    pub fn dispatch(&self, inbound: Inbound) -> Dispatch {
        self.dispatch_run(inbound, None)
    }

    /// Starts `inbound` as a retry of the recorded run `parent` (linked to it in the record).
    pub fn dispatch_retry(&self, inbound: Inbound, parent: String) -> Dispatch {
        self.dispatch_run(inbound, Some(parent))
    }

    fn dispatch_run(&self, mut inbound: Inbound, parent: Option<String>) -> Dispatch {
        let (reply, parts, inbox) = if inbound.duplex {
            let (reply, parts, inbox) = Reply::duplex(inbound.transport);
            (reply, parts, Some(inbox))
        } else {
            let (reply, parts) = Reply::channel(inbound.transport);
            (reply, parts, None)
        };
        let context_id = id::next_id();
        let root_id = id::format(context_id);
        let abort = self.halt.child_token();
        let admitted = self.admission.admit(
            inbound.client,
            crate::kernel::budget::json_size(&inbound.args) as usize,
        );
        let permit = match admitted {
            Ok(permit) => permit,
            Err(why) => {
                // Full: answered at once, nothing started (the channel is new: there is room).
                let err = SkillError::busy(why);
                // Nothing runs them: the record takes the args rather than a copy.
                let args = std::mem::take(&mut inbound.args);
                if let Some(record) = self.record(&root_id, &mut inbound, args, parent) {
                    self.kernel.bus().runs().record(record.end(Err(&err)));
                }
                let _ = reply.offer_done(Err(err));
                return Dispatch {
                    parts,
                    root_id,
                    reply,
                    inbox,
                    _abort: abort.drop_guard(),
                };
            }
        };
        let run = Run {
            gateway: self.clone(),
            reply: reply.clone(),
            context_id,
            root_id: root_id.clone(),
            abort: abort.clone(),
            parent,
        };
        // The run continues the trace of the request that started it. Its future is made here,
        // so the task holds it alone, not beside the run and request it is made of; and boxed,
        // so spawning the task, and ending it, move a pointer rather than the whole future.
        let go = run.go(inbound);
        tokio::spawn(Box::pin(tracing::Instrument::in_current_span(async move {
            go.await;
            drop(permit);
        })));
        Dispatch {
            parts,
            root_id,
            reply,
            inbox,
            _abort: abort.drop_guard(),
        }
    }
}

impl Gateway {
    /// The runs record's entry for the run `root_id` of `inbound`, begun now; `None` while runs
    /// are not recorded.
    fn record(
        &self,
        root_id: &str,
        inbound: &mut Inbound,
        args: impl Into<Arc<Value>>,
        parent: Option<String>,
    ) -> Option<Box<RunRecord>> {
        let runs = self.kernel.bus().runs();
        if !runs.on() {
            return None;
        }
        let found = inbound.tool.take();
        let tool = match &inbound.skill {
            ToolRef::Name(name) => {
                found.or_else(|| self.kernel.registry().current().get(name).cloned())
            }
            ToolRef::Def(tool) => Some(tool.clone()),
        };
        let mut record = RunRecord::begin(
            root_id,
            inbound.transport,
            inbound.authority.principal.id(),
            inbound.skill.name(),
            args,
        );
        record.tool = tool;
        record.parent = parent;
        record.trace = crate::telemetry::trace_id();
        record.project_level = inbound.authority.level == Level::Project;
        runs.started(&record);
        Some(record)
    }
}

/// `nonlocals.gateway` of a run: the door's name (as `name` and `transport`), where its
/// answer goes, the request's id and the caller's principal; `sessionId` is added after.
static GATEWAY: Shape<5> = Shape::new(["name", "transport", "replyTo", "requestId", "principal"]);
/// What a door seeds a run's `nonlocals` with.
static NONLOCALS: Shape<2> = Shape::new(["request", "gateway"]);

struct Run {
    gateway: Gateway,
    reply: Arc<Reply>,
    context_id: u64,
    root_id: String,
    abort: CancellationToken,
    /// The recorded run this one retries.
    parent: Option<String>,
}

impl Run {
    /// The run's future. A plain `fn` whose first steps (the record begun, the args taken out)
    /// run before the future is made: an `async fn` would keep `inbound` twice in its future
    /// (as its argument and as its local), and the run's task is moved whole as it is spawned.
    fn go(mut self, mut inbound: Inbound) -> impl Future<Output = ()> + Send + use<> {
        let transport = inbound.transport;
        let feeds = inbound.follow.then(|| self.follow());
        // One copy of the args, however large: the invocation and its record share it.
        let args = Arc::new(std::mem::take(&mut inbound.args));
        let mut record = self.gateway.record(
            &self.root_id,
            &mut inbound,
            args.clone(),
            self.parent.take(),
        );
        // A recorded run's start and skill name serve its metrics too (one clock read and one
        // copy of the name a run fewer).
        let started = record
            .as_ref()
            .map_or_else(quanta::Instant::now, |record| record.started_at());
        let unrecorded = record.is_none().then(|| inbound.skill.name().to_string());
        let times = record.as_mut().map(|record| {
            let times = EntryTimes::start(record.started_at());
            record.entries = Some(times.clone());
            times
        });
        async move {
            // Boxed: the invocation's future is the largest part of a run's, and a run's task is
            // moved whole as it is spawned; boxed, it is written once, where it runs.
            let outcome = Box::pin(self.invoke(inbound, args, times)).await;
            // Everything the run logged or emitted was offered as it happened.
            drop(feeds);
            let skill = match (&record, &unrecorded) {
                (Some(record), _) => record.skill.as_str(),
                (None, name) => name.as_deref().unwrap_or_default(),
            };
            self.gateway.metrics.invocation(
                skill,
                transport,
                outcome.as_ref().err().map(|e| e.kind()),
                started.elapsed(),
            );
            if let Some(record) = record {
                let ended = record.end(outcome.as_ref().map(Option::as_ref));
                self.gateway.kernel.bus().runs().record(ended);
            }
            let _ = self.reply.send(ReplyPart::Done(outcome)).await;
        }
    }

    /// Runs `inbound` on `args` (taken out of it), gathering its entries' timings into `times`
    /// when given.
    ///
    /// A plain `fn` that takes `inbound` apart before the future is made: an `async fn` would
    /// keep it whole beside its parts.
    fn invoke(
        &self,
        inbound: Inbound,
        args: Arc<Value>,
        times: Option<Arc<EntryTimes>>,
    ) -> impl Future<Output = Result<crate::kernel::invoke::Output>> + Send + '_ {
        let Inbound {
            transport,
            skill,
            mut request,
            request_id,
            reply_to,
            announce,
            timeout,
            session,
            authority,
            ..
        } = inbound;
        async move {
            // Args are data: refused before the message is announced or anything runs.
            crate::gateway::edge::check_args(&args)?;
            let kernel = &self.gateway.kernel;
            if let Some(data) = announce {
                let mut event = Event::new("gateway-message", "message");
                event.source = Some(transport.to_string());
                event.data = Some(data);
                event.root_context_id = Some(self.root_id.clone());
                event.principal = Some(authority.principal.id().to_string());
                kernel.bus().emit(&event).await?;
            }
            request.insert("id".into(), Value::String(request_id.clone()));
            let principal = authority.principal.id().to_string();
            let mut options = InvokeOptions::as_authority(authority);
            let seed = &mut options.context;
            seed.id = Some(self.context_id);
            seed.signal = Some(self.abort.clone());
            let mut gateway = GATEWAY.object([
                Value::from(transport),
                Value::from(transport),
                reply_to,
                Value::String(request_id),
                Value::String(principal),
            ]);
            if let Some(session) = session {
                gateway.insert("sessionId".into(), Value::String(session));
            }
            seed.nonlocals = NONLOCALS.object([Value::Object(request), Value::Object(gateway)]);
            seed.extensions
                .push((RESPONSE_PATH.into(), self.reply.clone()));
            if let Some(times) = &times {
                seed.extensions.push((RECORD_PATH.into(), times.clone()));
            }

            // One instant: the one the run's long waits end before is the one enforced here.
            let ends = timeout.map(|limit| tokio::time::Instant::now() + limit);
            if let Some(ends) = ends {
                seed.extensions
                    .push((DEADLINE_PATH.into(), Arc::new(Deadline(ends))));
            }
            let run = timed(times, kernel.invoke(skill, args, options));
            let deadline = async {
                match ends {
                    Some(ends) => tokio::time::sleep_until(ends).await,
                    None => std::future::pending().await,
                }
            };
            // The run is dropped (not only signalled) on a timeout or an abort, so a skill that
            // ignores its signal cannot hold the reply open.
            tokio::select! {
                outcome = run => outcome,
                () = deadline => {
                    self.abort.cancel();
                    let limit = timeout.unwrap_or_default();
                    Err(SkillError::new(
                        ErrorKind::Aborted,
                        format!(
                            "the skill did not finish within {} ms and was aborted",
                            limit.as_millis()
                        ),
                    )
                    .with_data(json!({ "timeout": true })))
                }
                () = self.abort.cancelled() => Err(SkillError::new(
                    ErrorKind::Aborted,
                    "the run was aborted: the server is shutting down or the client went away",
                )),
            }
        }
    }

    /// Offers this run's log events and bus events as reply parts as they are produced, until
    /// the taps are dropped.
    fn follow(&self) -> (Tap<u64, Arc<Value>>, Tap<String, Arc<Event>>) {
        let reply = self.reply.clone();
        let logs = self
            .gateway
            .kernel
            .logs()
            .tap_run(self.context_id, move |v| {
                reply.offer(ReplyPart::Log(v.clone()))
            });
        let reply = self.reply.clone();
        let events = self.gateway.kernel.bus().tap_run(&self.root_id, move |e| {
            reply.offer(ReplyPart::Event(e.to_json()))
        });
        (logs, events)
    }
}
