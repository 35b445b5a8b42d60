//! The event bus: envelopes, topics, the store behind them, handler workers and waiters.
//!
//! Guarantees (every store): a durable emit is committed before `emit` returns; delivery is at
//! least once; an entry not acked within its visibility timeout comes back at its old place in
//! the queue; nack puts it at the front; an acked entry never comes back; after
//! `delivery_limit` deliveries an entry moves to the queue `dead` of `<topic>.dead`. Within one
//! queue, entries are delivered in emit order, except that a nacked entry jumps to the front and
//! an entry whose visibility timed out is delivered again after entries claimed meanwhile.

pub mod batch;
pub mod consumer;
pub mod dead;
pub mod memory;
pub mod migrations;
pub mod open;
pub mod postgres;
pub mod records;
pub mod routes;
pub mod run_blocks;
pub mod runs;
pub mod skills;
pub mod sql_records;
pub mod sql_store;
pub mod sqlite;
pub mod sqlite_runs;
pub mod store;
pub mod store_url;
pub mod tail;
pub mod writer;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::context::id::{next_id, now_ms};
use crate::context::tap::{Tap, Taps};
use crate::error::{ErrorKind, Result, SkillError};
use crate::kernel::{InvokeOptions, Kernel, KernelBuilder};
pub use consumer::{Consumer, ConsumerOptions};
pub use records::{Claim, KeyClaim, Records, SessionEntry, StoredSchedule, StoredSubscription};
pub use store::{Delivery, EventStore, Limits, StoreError, WAKE_ALL};

/// The queue that collects an exhausted topic's dead letters (on topic `<topic>.dead`).
pub const DEAD_QUEUE: &str = "dead";
/// The queue `event-wait` uses when none is named.
pub const DEFAULT_QUEUE: &str = "default";
/// How often waiters re-read even without a wakeup (covers visibility timeouts and other
/// processes on a store without notifications).
const POLL: Duration = Duration::from_millis(250);
/// How often a paused handler (its key revoked) looks whether its key is back.
const PAUSE_RECHECK: Duration = Duration::from_secs(2);
/// Entries a skill handler's consumer claims ahead (handled one at a time, in order).
const HANDLER_PREFETCH: usize = 8;

/// The event envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// 16 hex characters (a process-unique 64-bit id, as context ids are).
    pub id: String,
    pub topic: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Milliseconds since the epoch at emission.
    pub timestamp: u64,
    #[serde(
        rename = "rootContextId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub root_context_id: Option<String>,
    /// How many skill invocations deep the emitting run was (skillgate's addition to the
    /// envelope). A handler run starts one deeper, so a handler that re-emits to its own topic
    /// ends at the kernel's depth limit instead of running forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// Who emitted it (`key:ops`, `local`, `project`, ...): set by the kernel from the emitting
    /// run's authority, never by the emitter (`source` is free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The budget of the emitting run (skillgate's addition, set by the kernel): a handler it
    /// starts while that run is alive spends from it (see `kernel::budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
}

pub use crate::kernel::authority::is_reserved_topic;

/// The queue `queue` names for `principal`: a principal's queues are its own (prefixed with its
/// namespace), so it can never name a worker's or another principal's; the project's and an
/// `admin` key's names are taken as they are.
pub fn owned_queue(principal: &crate::kernel::authority::Principal, queue: &str) -> String {
    match principal.namespace() {
        Some(ns) if !principal.admin() => format!("{ns}.{queue}"),
        _ => queue.to_string(),
    }
}

/// Marks an `event-emit` run started by skillgate itself (a typed extension at
/// [`SYSTEM_EMIT_PATH`]: nothing that arrives as JSON can forge it), which may use reserved topics.
#[derive(Debug)]
pub struct SystemEmit;

/// Where [`SystemEmit`] is stored on the `event-emit` context (a `locals` path: not inherited).
pub const SYSTEM_EMIT_PATH: &str = "locals.internals.systemEmit";

impl Event {
    /// A new event with a fresh id and the current time.
    pub fn new(topic: &str, kind: &str) -> Event {
        Event {
            id: format!("{:016x}", next_id()),
            topic: topic.to_string(),
            kind: kind.to_string(),
            source: None,
            data: None,
            timestamp: now_ms(),
            root_context_id: None,
            depth: None,
            principal: None,
            budget: None,
        }
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub(crate) fn to_body(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub(crate) fn from_body(body: &str) -> std::result::Result<Event, StoreError> {
        serde_json::from_str(body)
            .map_err(|e| StoreError::Invalid(format!("stored event is not an envelope: {e}")))
    }
}

/// The dead letter for an entry that used up its deliveries.
pub(crate) fn dead_letter(event: &Event, queue: &str, attempts: u32) -> Event {
    let mut letter = Event::new(&format!("{}.dead", event.topic), "dead-letter");
    letter.source = Some("event-bus".into());
    letter.root_context_id = event.root_context_id.clone();
    letter.data = Some(json!({ "event": event, "queue": queue, "attempts": attempts }));
    letter
}

/// The event bus of a kernel, for the layers above it: `kernel.bus()` with this in scope.
pub trait KernelBus {
    fn bus(&self) -> &Arc<Bus>;
}

impl KernelBus for Kernel {
    /// # Panics
    /// On a bare kernel: one from `crate::builtins::builder` always has a bus.
    fn bus(&self) -> &Arc<Bus> {
        self.extension::<Bus>()
            .expect("the kernel has no event bus: build it with skillgate::builtins::builder")
    }
}

/// `.bus(bus)` on a kernel builder: events go through `bus` (and its store).
pub trait WithBus {
    fn bus(self, bus: Arc<Bus>) -> Self;
}

impl WithBus for KernelBuilder {
    fn bus(self, bus: Arc<Bus>) -> Self {
        self.extension(bus)
    }
}

/// Checks a topic or queue name: lowercase letters, digits, `-`, `_`, `.`, `:`, at most 200.
/// The names [`check_name`] accepts, as the JSON-schema `pattern` the event skills' params and
/// `openapi.yaml` declare (tests hold the three to it).
pub const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9._:-]{0,199}$";

pub fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.' | b':')
        });
    if ok {
        Ok(())
    } else {
        Err(SkillError::new(
            ErrorKind::InvalidArgs,
            format!(
                "invalid {what} `{name}`: use 1 to 200 lowercase letters, digits, `-`, `_`, `.` or `:`, starting with a letter or digit"
            ),
        ))
    }
}

/// Checks the topic of each of `events` ([`check_name`]).
fn check_topics(events: &[Event]) -> Result<()> {
    events
        .iter()
        .try_for_each(|event| check_name("topic", &event.topic))
}

/// A handler to subscribe: the topic it takes events of, the skill it runs, the args it is
/// given, the principal it runs as, and whether its new queue starts with the topic's buffer.
pub struct Handler {
    pub topic: String,
    pub reference: String,
    pub args: Option<Value>,
    pub principal: crate::kernel::authority::Principal,
    pub replay: bool,
}

/// Bus settings.
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// How long a claimed entry stays invisible before it is delivered again.
    pub visibility: Duration,
    /// How long one run of a skill handler may take before it is stopped and its event nacked.
    pub handler_timeout: Duration,
    /// How root runs are recorded (by default as [`runs::RecordConfig::default`]); `None`:
    /// they are not.
    pub runs: Option<runs::RecordConfig>,
}

impl BusConfig {
    /// Settings with this visibility timeout; handler runs may last as long (a run still going
    /// when its event becomes visible again would be racing its own redelivery).
    pub fn with_visibility(visibility: Duration) -> BusConfig {
        BusConfig {
            visibility,
            handler_timeout: visibility,
            runs: Some(runs::RecordConfig::default()),
        }
    }
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig::with_visibility(Duration::from_secs(30))
    }
}

/// The bus of one process: a store, plus the handler workers this process runs.
pub struct Bus {
    store: Arc<dyn EventStore>,
    config: BusConfig,
    /// (topic, queue) -> the worker serving a skill handler.
    workers: Mutex<HashMap<(String, String), CancellationToken>>,
    stop: CancellationToken,
    /// Every event this process emits, for in-process watchers (a gateway streaming a run's
    /// events). Not durable: a watcher that lags loses events, the store keeps them.
    emitted: tokio::sync::broadcast::Sender<Arc<Event>>,
    /// Runs whose events are streamed as they are emitted (a gateway's streaming client).
    taps: Arc<Taps<String, Arc<Event>>>,
    /// The topics followed in this process (`follow`).
    tails: tail::Tails,
    /// The (topic, skill) routes the project's skills declared at the last (re)load, so a
    /// reload that removes one stops its handler.
    declared: Mutex<std::collections::BTreeSet<(String, String)>>,
    /// The runs record of this process's root runs (off until the server turns it on).
    runs: runs::Recorder,
}

fn store_error(err: StoreError) -> SkillError {
    match err {
        StoreError::Invalid(message) => SkillError::new(ErrorKind::InvalidArgs, message),
        other => SkillError::internal(other.to_string()),
    }
}

/// Ok when nothing was `unknown`; else the error naming the receipts or ids (`what`) that no
/// entry of the queue held.
fn unknown_settled<T: std::fmt::Display + Serialize>(
    what: &str,
    unknown: &[T],
    topic: &str,
    queue: &str,
) -> Result<()> {
    if unknown.is_empty() {
        return Ok(());
    }
    Err(SkillError::new(
        ErrorKind::InvalidArgs,
        format!(
            "unknown {what}{} {} in queue `{queue}` of `{topic}` (already acked, or never delivered there)",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", ")
        ),
    )
    .with_data(json!({ "unknown": unknown })))
}

/// The queue a skill handler's events go through.
pub fn handler_queue(reference: &str) -> String {
    format!("handler:{reference}")
}

impl Bus {
    pub fn new(store: Arc<dyn EventStore>, config: BusConfig) -> Bus {
        let runs = runs::Recorder::new(store.clone());
        runs.configure(config.runs);
        Bus {
            config,
            workers: Mutex::new(HashMap::new()),
            declared: Mutex::new(std::collections::BTreeSet::new()),
            stop: CancellationToken::new(),
            emitted: tokio::sync::broadcast::channel(1024).0,
            taps: Taps::new(),
            tails: tail::Tails::default(),
            runs,
            store,
        }
    }

    pub fn store(&self) -> &Arc<dyn EventStore> {
        &self.store
    }

    /// The runs record's writer.
    pub fn runs(&self) -> &runs::Recorder {
        &self.runs
    }

    /// Publishes an event; durable when this returns.
    pub async fn emit(&self, event: &Event) -> Result<()> {
        self.emit_many(std::slice::from_ref(event)).await
    }

    /// Publishes several events committed together (one statement for the durable stores), in
    /// order; durable when this returns.
    pub async fn emit_many(&self, events: &[Event]) -> Result<()> {
        check_topics(events)?;
        self.store.emit_many(events).await.map_err(store_error)?;
        self.announce(events);
        Ok(())
    }

    /// Publishes `events` only if `claim.key` is won, in one commit with the claim and its
    /// answer (see [`EventStore::emit_claimed`]); a held key publishes nothing and says who
    /// holds it.
    pub async fn emit_claimed(&self, claim: &Claim, events: &[Event]) -> Result<KeyClaim> {
        check_topics(events)?;
        let got = self
            .store
            .emit_claimed(claim, events)
            .await
            .map_err(store_error)?;
        if got == KeyClaim::Won {
            self.announce(events);
        }
        Ok(got)
    }

    /// Hands committed `events` to this process's taps and watchers.
    fn announce(&self, events: &[Event]) {
        let watched = self.emitted.receiver_count() > 0;
        if watched || self.taps.any() {
            for event in events {
                let event = Arc::new(event.clone());
                if let Some(root) = &event.root_context_id {
                    self.taps.deliver(root.as_str(), &event);
                }
                if watched {
                    let _ = self.emitted.send(event);
                }
            }
        }
    }

    /// A consumer of `queue` (created if missing) that claims ahead in batches of `prefetch`
    /// and settles acks in batches; it stops with the bus.
    pub async fn consumer(&self, topic: &str, queue: &str, prefetch: usize) -> Result<Consumer> {
        self.subscribe_queue(topic, queue, false).await?;
        Ok(Consumer::start(
            self.store.clone(),
            topic,
            queue,
            ConsumerOptions {
                prefetch,
                visibility: self.config.visibility,
            },
            self.stop.child_token(),
        ))
    }

    /// Events emitted by this process from now on (after they are stored). A watcher that lags
    /// loses events; to stream one run's events, tap it ([`Bus::tap_run`]).
    pub fn watch(&self) -> tokio::sync::broadcast::Receiver<Arc<Event>> {
        self.emitted.subscribe()
    }

    /// Calls `f` with each event this process emits in the run whose root context is `root_id`
    /// (once it is stored), until the returned tap is dropped.
    pub fn tap_run(
        &self,
        root_id: &str,
        f: impl Fn(&Arc<Event>) + Send + Sync + 'static,
    ) -> Tap<String, Arc<Event>> {
        self.taps.tap(root_id.to_string(), Arc::new(f))
    }

    /// Creates a queue for `event-wait` (idempotent); with `replay` a new queue starts with the
    /// topic's buffered events.
    pub async fn subscribe_queue(&self, topic: &str, queue: &str, replay: bool) -> Result<bool> {
        check_name("topic", topic)?;
        check_name("queue", queue)?;
        self.store
            .create_queue(topic, queue, replay)
            .await
            .map_err(store_error)
    }

    /// Subscribes skill `reference` to `topic`: its durable queue, and a worker in this process
    /// that invokes it with each event (ack on success, nack on failure). Idempotent.
    pub async fn subscribe_handler(
        self: &Arc<Self>,
        kernel: &Kernel,
        topic: &str,
        reference: &str,
        args: Option<Value>,
        replay: bool,
    ) -> Result<bool> {
        let handler = Handler {
            topic: topic.to_string(),
            reference: reference.to_string(),
            args,
            principal: crate::kernel::authority::Principal::project(),
            replay,
        };
        self.subscribe_handler_as(kernel, handler).await
    }

    /// [`Bus::subscribe_handler`] for `handler.principal`: the handler runs as its call (named
    /// under its grants, args as data), on a queue of its own.
    pub async fn subscribe_handler_as(
        self: &Arc<Self>,
        kernel: &Kernel,
        handler: Handler,
    ) -> Result<bool> {
        let Handler {
            topic,
            reference,
            args,
            principal,
            replay,
        } = handler;
        let topic = topic.as_str();
        let queue = handler_queue_for(&principal, &reference);
        self.subscribe_queue(topic, &queue, replay).await?;
        let key = (topic.to_string(), queue.clone());
        let token = {
            let mut workers = self.workers.lock();
            if workers.contains_key(&key) {
                return Ok(false);
            }
            let token = self.stop.child_token();
            workers.insert(key, token.clone());
            token
        };
        let worker = Worker {
            bus: self.clone(),
            kernel: kernel.clone(),
            topic: topic.to_string(),
            queue,
            reference,
            args,
            authority: crate::kernel::authority::Authority::caller(principal),
            stop: token,
        };
        tokio::spawn(worker.run());
        Ok(true)
    }

    /// [`Bus::subscribe_handler_as`], kept in the store with its args and principal so that
    /// [`restore_subscriptions`] starts its worker again after a restart (`event-subscribe`).
    pub async fn subscribe_kept(
        self: &Arc<Self>,
        kernel: &Kernel,
        handler: Handler,
    ) -> Result<bool> {
        let spec = json!({
            "ref": handler.reference,
            "args": handler.args,
            "principal": handler.principal.to_json(),
        });
        let queue = handler_queue_for(&handler.principal, &handler.reference);
        let topic = handler.topic.clone();
        let created = self.subscribe_handler_as(kernel, handler).await?;
        self.store
            .put_subscription(&topic, &queue, &spec.to_string())
            .await
            .map_err(store_error)?;
        Ok(created)
    }

    /// Removes handlers of `topic` for `principal`: its own (`reference`, or all of them); with
    /// `admin`, the project's and every principal's too. Returns how many.
    pub async fn unsubscribe_for(
        &self,
        topic: &str,
        reference: Option<&str>,
        principal: &crate::kernel::authority::Principal,
    ) -> Result<usize> {
        check_name("topic", topic)?;
        let own = principal.namespace().map(|ns| format!("{ns}."));
        let queues: Vec<String> = self
            .store
            .queues(topic)
            .await
            .map_err(store_error)?
            .into_iter()
            .filter(|q| {
                let (prefix, rest) = match q.find("handler:") {
                    Some(at) => q.split_at(at),
                    None => return false,
                };
                let mine = match &own {
                    Some(own) => prefix == own,
                    None => prefix.is_empty(),
                };
                (mine || principal.admin()) && reference.is_none_or(|r| rest == handler_queue(r))
            })
            .collect();
        self.drop_handlers(topic, queues).await
    }

    /// Removes one skill handler (`reference`), or every handler of the topic. Returns how many.
    pub async fn unsubscribe(&self, topic: &str, reference: Option<&str>) -> Result<usize> {
        check_name("topic", topic)?;
        let queues: Vec<String> = match reference {
            Some(r) => vec![handler_queue(r)],
            None => self
                .store
                .queues(topic)
                .await
                .map_err(store_error)?
                .into_iter()
                .filter(|q| q.starts_with("handler:"))
                .collect(),
        };
        self.drop_handlers(topic, queues).await
    }

    /// Records `now` as the routes the project declares; returns those declared before and no
    /// longer (their handlers are for the caller to remove).
    pub(crate) fn replace_declared(
        &self,
        now: std::collections::BTreeSet<(String, String)>,
    ) -> Vec<(String, String)> {
        let before = std::mem::replace(&mut *self.declared.lock(), now.clone());
        before.difference(&now).cloned().collect()
    }

    /// Stops the workers of `queues` and drops the queues; returns how many were there.
    async fn drop_handlers(&self, topic: &str, queues: Vec<String>) -> Result<usize> {
        let mut removed = 0;
        for queue in queues {
            if let Some(token) = self
                .workers
                .lock()
                .remove(&(topic.to_string(), queue.clone()))
            {
                token.cancel();
            }
            self.store
                .delete_subscription(topic, &queue)
                .await
                .map_err(store_error)?;
            if self
                .store
                .drop_queue(topic, &queue)
                .await
                .map_err(store_error)?
            {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Removes a named `event-wait` queue.
    pub async fn drop_queue(&self, topic: &str, queue: &str) -> Result<bool> {
        self.store
            .drop_queue(topic, queue)
            .await
            .map_err(store_error)
    }

    /// Waits up to `timeout` for entries of `queue`, returning at once with what is there.
    /// With `ack`, entries are acked as they are handed out; else the caller acks or nacks.
    pub async fn wait(
        &self,
        topic: &str,
        queue: &str,
        timeout: Duration,
        max: usize,
        ack: bool,
    ) -> Result<Vec<Delivery>> {
        check_name("topic", topic)?;
        check_name("queue", queue)?;
        if !self
            .store
            .queues(topic)
            .await
            .map_err(store_error)?
            .iter()
            .any(|q| q == queue)
        {
            self.store
                .create_queue(topic, queue, false)
                .await
                .map_err(store_error)?;
        }
        let mut wakeups = self.store.wakeups();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let got = self
                .store
                .claim(topic, queue, max.max(1), self.config.visibility)
                .await
                .map_err(store_error)?;
            if !got.is_empty() {
                if ack {
                    let receipts: Vec<u64> = got.iter().map(|d| d.receipt).collect();
                    self.store
                        .ack(topic, queue, &receipts)
                        .await
                        .map_err(store_error)?;
                }
                return Ok(got);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let nap = (deadline - now).min(POLL);
            tokio::select! {
                () = self.stop.cancelled() => return Ok(Vec::new()),
                () = tokio::time::sleep(nap) => {}
                woke = wakeups.recv() => match woke {
                    Ok(t) if t == topic || t == WAKE_ALL => {}
                    Ok(_) => continue,
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => tokio::time::sleep(nap).await,
                },
            }
        }
    }

    /// Acks (or, with `nack`, returns to the front) entries by receipt; unknown receipts are an
    /// error that names them (the known ones are still handled).
    pub async fn ack(&self, topic: &str, queue: &str, receipts: &[u64], nack: bool) -> Result<()> {
        check_name("topic", topic)?;
        check_name("queue", queue)?;
        let unknown = if nack {
            self.store.nack(topic, queue, receipts).await
        } else {
            self.store.ack(topic, queue, receipts).await
        }
        .map_err(store_error)?;
        unknown_settled("receipt", &unknown, topic, queue)
    }

    /// [`Bus::ack`] by event id, for callers that kept only the envelope. An id held by no
    /// entry of the queue is an error naming it; an id held by two entries (two events that
    /// happen to share an id) is refused, since acking by id cannot tell them apart: ack those
    /// by receipt.
    pub async fn ack_ids(
        &self,
        topic: &str,
        queue: &str,
        ids: &[String],
        nack: bool,
    ) -> Result<()> {
        check_name("topic", topic)?;
        check_name("queue", queue)?;
        let found = self
            .store
            .receipts(topic, queue, ids)
            .await
            .map_err(store_error)?;
        let mut receipts = Vec::with_capacity(ids.len());
        let mut unknown = Vec::new();
        for id in ids {
            let mut held = found.iter().filter(|(i, _)| i == id);
            match (held.next(), held.next()) {
                (Some((_, receipt)), None) => receipts.push(*receipt),
                (None, _) => unknown.push(id.clone()),
                (Some(_), Some(_)) => {
                    return Err(SkillError::new(
                        ErrorKind::InvalidArgs,
                        format!(
                            "event id `{id}` is held by more than one entry of queue `{queue}` of `{topic}`: settle them by `receipt`"
                        ),
                    ));
                }
            }
        }
        if !receipts.is_empty() {
            self.ack(topic, queue, &receipts, nack).await?;
        }
        unknown_settled("event id", &unknown, topic, queue)
    }

    /// Stops every handler worker and wakes every waiter.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

/// Runs one skill handler: claim, invoke, ack or nack, wait for more.
struct Worker {
    bus: Arc<Bus>,
    kernel: Kernel,
    topic: String,
    queue: String,
    reference: String,
    args: Option<Value>,
    /// Who the handler runs for.
    authority: crate::kernel::authority::Authority,
    stop: CancellationToken,
}

impl Worker {
    async fn run(self) {
        let mut told = false;
        loop {
            // A key's handlers pause while no key has its name (revoked), taking nothing from
            // the queue, and go on when a key of that name returns.
            if let Some(why) = self.paused() {
                if !told {
                    tracing::info!(topic = %self.topic, handler = %self.reference, "handler paused: {why}");
                    told = true;
                }
                tokio::select! {
                    () = tokio::time::sleep(PAUSE_RECHECK) => continue,
                    () = self.stop.cancelled() => return,
                }
            }
            told = false;
            let consumer = Consumer::start(
                self.bus.store.clone(),
                &self.topic,
                &self.queue,
                ConsumerOptions {
                    prefetch: HANDLER_PREFETCH,
                    visibility: self.bus.config.visibility,
                },
                self.stop.child_token(),
            );
            while let Some(delivery) = consumer.next().await {
                let receipt = delivery.receipt;
                if self.paused().is_some() {
                    consumer.nack(receipt);
                    break;
                }
                if self.handle(delivery).await {
                    consumer.ack(receipt);
                } else {
                    consumer.nack(receipt);
                }
            }
            consumer.close().await;
            if self.stop.is_cancelled() {
                return;
            }
        }
    }

    /// Why the handler may not run now (its key was revoked), if so.
    fn paused(&self) -> Option<&'static str> {
        let keys = self.kernel.extension::<crate::kernel::authority::Keys>()?;
        keys.current(&self.authority.principal).err()
    }

    /// Runs the handler on one event: true when it succeeded.
    async fn handle(&self, delivery: Delivery) -> bool {
        let limit = self.bus.config.handler_timeout;
        // A key's handler runs with the key's grants of now.
        let authority = match self.kernel.extension::<crate::kernel::authority::Keys>() {
            Some(keys) => match keys.current(&self.authority.principal) {
                Ok(principal) => self.authority.clone().with_principal(principal),
                Err(_) => return false,
            },
            None => self.authority.clone(),
        };
        let id = crate::context::id::next_id();
        let args = handler_args(self.args.as_ref(), &delivery.event);
        let runs = self.bus.runs();
        let record = runs.on().then(|| {
            let mut record = runs::RunRecord::begin(
                &crate::context::id::format(id),
                "event",
                authority.principal.id(),
                self.reference.as_str(),
                args.clone(),
            );
            record.event = Some(delivery.event.id.clone());
            record.project_level = authority.level == crate::kernel::authority::Level::Project;
            runs.started(&record);
            record
        });
        let run = handler_run(
            &self.kernel,
            &self.reference,
            args,
            (authority, Some(id)),
            &delivery.event,
        );
        // Dropping the run on a timeout aborts it; the event comes back (nack) and, if it keeps
        // timing out, ends as a dead letter.
        let outcome = match tokio::time::timeout(limit, run).await {
            Ok(outcome) => outcome,
            Err(_) => Err(SkillError::new(
                ErrorKind::Aborted,
                format!(
                    "the handler did not finish within {} ms and was stopped",
                    limit.as_millis()
                ),
            )
            .with_data(json!({ "timeout": true }))),
        };
        if let Some(record) = record {
            runs.record(record.end(outcome.as_ref().map(Option::as_ref)));
        }
        match outcome {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!(error = %err, topic = %self.topic, handler = %self.reference, "event handler failed; the event will be delivered again");
                false
            }
        }
    }
}

/// The queue of handler `reference` for `principal`: the project's is `handler:<ref>`, a
/// principal's is in its namespace.
fn handler_queue_for(principal: &crate::kernel::authority::Principal, reference: &str) -> String {
    match principal.namespace() {
        Some(ns) => format!("{ns}.{}", handler_queue(reference)),
        None => handler_queue(reference),
    }
}

/// Starts a worker again for every subscription `event-subscribe` kept (after a restart), each
/// for its principal with its args. Returns how many were started; unreadable ones are logged.
pub async fn restore_subscriptions(kernel: &Kernel) -> usize {
    let bus = kernel.bus().clone();
    let kept = match bus.store.subscriptions().await {
        Ok(kept) => kept,
        Err(e) => {
            tracing::error!("kept subscriptions could not be read: {e}");
            return 0;
        }
    };
    let mut started = 0;
    for sub in kept {
        let spec: Value = serde_json::from_str(&sub.spec).unwrap_or(Value::Null);
        let principal = crate::kernel::authority::Principal::from_json(&spec["principal"]);
        let (Some(reference), Ok(principal)) = (spec["ref"].as_str(), principal) else {
            tracing::error!(topic = %sub.topic, queue = %sub.queue, "an unreadable kept subscription was skipped");
            continue;
        };
        let handler = Handler {
            topic: sub.topic.clone(),
            reference: reference.to_string(),
            args: Some(spec["args"].clone()).filter(|a| !a.is_null()),
            principal,
            replay: false,
        };
        match bus.subscribe_handler_as(kernel, handler).await {
            Ok(true) => started += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(topic = %sub.topic, handler = reference, "a kept subscription was not restored: {e}")
            }
        }
    }
    started
}

/// Invokes handler `reference` with `event` (its envelope as args, `extra` args filling what
/// the envelope leaves) as `authority`'s call: what a subscription's worker does with each
/// event. The envelope and the stored args are data (directive keys in them are refused below
/// project level).
pub async fn run_handler(
    kernel: &Kernel,
    reference: &str,
    extra: Option<&Value>,
    authority: crate::kernel::authority::Authority,
    event: &Event,
) -> Result<crate::kernel::invoke::Output> {
    let args = handler_args(extra, event);
    handler_run(kernel, reference, args, (authority, None), event).await
}

/// [`run_handler`] with its args made (`handler_args`), as root context `id` when given.
async fn handler_run(
    kernel: &Kernel,
    reference: &str,
    args: Value,
    (authority, id): (crate::kernel::authority::Authority, Option<u64>),
    event: &Event,
) -> Result<crate::kernel::invoke::Output> {
    let mut options = InvokeOptions::as_authority(authority);
    options.context.id = id;
    options.context.depth = event.depth;
    options.context.budget = event.budget;
    kernel.invoke(reference, args, options).await
}

/// What a handler is given: the event's envelope, with the subscription's `extra` args where
/// the envelope has no field of the name.
fn handler_args(extra: Option<&Value>, event: &Event) -> Value {
    let mut args = event.to_json();
    if let (Value::Object(map), Some(Value::Object(extra))) = (&mut args, extra) {
        for (k, v) in extra {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    args
}

/// How an emit is written: the envelope fields a skill may give.
pub fn event_from_args(args: &Value, source: &str, root: &str) -> Result<Event> {
    let topic = args.get("topic").and_then(Value::as_str).ok_or_else(|| {
        SkillError::new(
            ErrorKind::InvalidArgs,
            "event-emit needs a `topic` (string)",
        )
    })?;
    check_name("topic", topic)?;
    let kind = args
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    let mut event = Event::new(topic, kind);
    event.source = Some(
        args.get("source")
            .and_then(Value::as_str)
            .unwrap_or(source)
            .to_string(),
    );
    event.data = args.get("data").cloned();
    event.root_context_id = Some(root.to_string());
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_pattern_accepts_exactly_what_check_name_accepts() {
        let validator =
            jsonschema::validator_for(&json!({ "type": "string", "pattern": NAME_PATTERN }))
                .unwrap();
        let long = "a".repeat(200);
        let too_long = "a".repeat(201);
        for name in [
            "orders",
            "a",
            "0",
            "x.y:z-w_1",
            &long,
            &too_long,
            "Orders",
            "-x",
            "_x",
            "",
            "a b",
            "a/b",
            "é",
        ] {
            assert_eq!(
                validator.is_valid(&json!(name)),
                check_name("topic", name).is_ok(),
                "`{name}`"
            );
        }
    }

    #[test]
    fn event_ids_are_16_hex_characters_and_unique() {
        let (a, b) = (Event::new("t", "x"), Event::new("t", "x"));
        for id in [&a.id, &b.id] {
            assert_eq!(id.len(), 16, "{id}");
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        }
        assert_ne!(a.id, b.id);
    }
}
