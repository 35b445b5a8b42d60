//! Prometheus metrics shared by every transport: HTTP requests and their latency, in-flight
//! requests, and invocations, errors and durations per skill and transport.
//!
//! Labels are bounded: methods are the standard ones or `other`, routes are path templates
//! (`/invoke/{skill}`) or `unmatched`, skills are registry names.
//!
//! The hot path keeps the handles it made: a request or invocation finds its counter and
//! histogram under one read lock with an Fx hash of borrowed labels, allocating nothing; only
//! the first of a label set goes through the families (String labels, SipHash).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use rustc_hash::FxHashMap;

use crate::error::ErrorKind;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkillLabels {
    skill: String,
    transport: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    skill: String,
    transport: String,
    kind: String,
}

/// The method as a label: one of the methods of RFC 9110 (and PATCH), else `other`, so made-up
/// methods cannot grow the label set.
pub fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method)
        .unwrap_or("other")
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// A label set's counter and histogram (shared with the family that exports them).
type Handles = (Counter, Histogram);
/// Handles by a small key, then by a name (route template or skill) looked up as `&str`.
type HandleCache<K> = parking_lot::RwLock<FxHashMap<K, FxHashMap<Box<str>, Handles>>>;

/// The handles under `key` and `name`, made by `make` the first time.
fn cached<K: std::hash::Hash + Eq + Copy>(
    cache: &HandleCache<K>,
    key: K,
    name: &str,
    make: impl FnOnce() -> Handles,
) -> Handles {
    if let Some(found) = cache.read().get(&key).and_then(|names| names.get(name)) {
        return found.clone();
    }
    let made = make();
    cache
        .write()
        .entry(key)
        .or_default()
        .entry(name.into())
        .or_insert(made)
        .clone()
}

fn latency_histogram() -> Histogram {
    // 100 µs to ~6.5 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// What the WebSocket sockets keep together, exported in `/metrics`.
#[derive(Clone, Default)]
pub struct WsGauges {
    /// Bytes queued to clients (the outboxes keep it).
    pub queued: Gauge<i64, AtomicI64>,
    /// Bytes of large messages being received (the intakes keep it).
    pub receiving: Gauge<i64, AtomicI64>,
    /// Sockets waiting for the receive budget.
    pub receive_waiting: Gauge<i64, AtomicI64>,
}

/// What request bodies being received hold together, exported in `/metrics`.
#[derive(Clone, Default)]
pub struct BodyGauges {
    /// Bytes of large bodies being received (see `body`).
    pub receiving: Gauge<i64, AtomicI64>,
    /// Requests whose body waits for the receive budget.
    pub waiting: Gauge<i64, AtomicI64>,
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Histograms<RouteLabels>,
    in_flight: Gauge<i64, AtomicI64>,
    /// What the WebSocket sockets keep together.
    ws: WsGauges,
    /// What request bodies being received hold together.
    bodies: BodyGauges,
    invocations: Family<SkillLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Histograms<SkillLabels>,
    /// Runs written to the runs record, and runs dropped (queue full, store down): totals the
    /// recorder keeps, read at each scrape.
    runs_recorded: Counter,
    runs_dropped: Counter,
    /// (method, status) then route template.
    request_handles: HandleCache<(&'static str, u16)>,
    /// Transport then skill.
    invocation_handles: HandleCache<Box<str>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("skillgate");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Histograms<RouteLabels> = Family::new_with_constructor(latency_histogram);
        let in_flight = Gauge::<i64, AtomicI64>::default();
        let ws = WsGauges::default();
        let bodies = BodyGauges::default();
        let invocations = Family::<SkillLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations: Histograms<SkillLabels> = Family::new_with_constructor(latency_histogram);
        registry.register(
            "http_requests",
            "HTTP requests by method, route template and status",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency until the response head, by method and route template",
            latency.clone(),
        );
        registry.register(
            "http_requests_in_flight",
            "HTTP requests being served",
            in_flight.clone(),
        );
        registry.register(
            "ws_send_queue_bytes",
            "Bytes queued to WebSocket clients, every socket together",
            ws.queued.clone(),
        );
        registry.register(
            "ws_receive_bytes",
            "Bytes of large WebSocket messages being received, every socket together",
            ws.receiving.clone(),
        );
        registry.register(
            "ws_receive_waiting",
            "WebSocket sockets waiting for the budget of messages being received",
            ws.receive_waiting.clone(),
        );
        registry.register(
            "http_body_receive_bytes",
            "Bytes of large HTTP request bodies being received, every connection together",
            bodies.receiving.clone(),
        );
        registry.register(
            "http_body_receive_waiting",
            "HTTP requests whose body waits for the budget of bodies being received",
            bodies.waiting.clone(),
        );
        registry.register(
            "invocations",
            "Skill invocations started by a transport, by skill and transport",
            invocations.clone(),
        );
        registry.register(
            "invocation_errors",
            "Skill invocations that failed, by skill, transport and error kind",
            errors.clone(),
        );
        registry.register(
            "invocation_duration_seconds",
            "Skill invocation time, by skill and transport",
            durations.clone(),
        );
        let runs_recorded = Counter::default();
        let runs_dropped = Counter::default();
        registry.register(
            "runs_recorded",
            "Runs written to the runs record",
            runs_recorded.clone(),
        );
        registry.register(
            "runs_dropped",
            "Runs the runs record dropped (its queue was full, or the store refused them)",
            runs_dropped.clone(),
        );
        crate::model_usage::register(&mut registry);
        Metrics {
            runs_recorded,
            runs_dropped,
            registry,
            requests,
            latency,
            in_flight,
            ws,
            bodies,
            invocations,
            errors,
            durations,
            request_handles: Default::default(),
            invocation_handles: Default::default(),
        }
    }

    /// Counts one finished HTTP request. `route` must be a template, never a raw path.
    pub fn request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let method = method_label(method);
        let (count, latency) = cached(&self.request_handles, (method, status), route, || {
            let labels = RouteLabels {
                method: method.to_string(),
                route: route.to_string(),
            };
            let latency = self.latency.get_or_create(&labels).clone();
            let count = self
                .requests
                .get_or_create(&RequestLabels {
                    method: labels.method,
                    route: labels.route,
                    status,
                })
                .clone();
            (count, latency)
        });
        latency.observe(elapsed.as_secs_f64());
        count.inc();
    }

    /// +1 / -1 requests in flight (from a request's head until its response body ends).
    pub fn in_flight(&self, delta: i64) {
        self.in_flight.inc_by(delta);
    }

    /// The gauges the WebSocket sockets keep (shared with them).
    pub fn ws(&self) -> WsGauges {
        self.ws.clone()
    }

    /// What request bodies being received hold together, to keep.
    pub fn bodies(&self) -> BodyGauges {
        self.bodies.clone()
    }

    /// Requests being served right now.
    pub fn in_flight_now(&self) -> i64 {
        self.in_flight.get()
    }

    /// Counts one invocation a transport started.
    pub fn invocation(
        &self,
        skill: &str,
        transport: &str,
        error: Option<ErrorKind>,
        elapsed: Duration,
    ) {
        let found = self
            .invocation_handles
            .read()
            .get(transport)
            .and_then(|skills| skills.get(skill))
            .cloned();
        let (count, duration) = found.unwrap_or_else(|| {
            let labels = SkillLabels {
                skill: skill.to_string(),
                transport: transport.to_string(),
            };
            let made = (
                self.invocations.get_or_create(&labels).clone(),
                self.durations.get_or_create(&labels).clone(),
            );
            self.invocation_handles
                .write()
                .entry(transport.into())
                .or_default()
                .entry(skill.into())
                .or_insert(made)
                .clone()
        });
        duration.observe(elapsed.as_secs_f64());
        // Errors are the rare path: through the family.
        if let Some(kind) = error {
            self.errors
                .get_or_create(&ErrorLabels {
                    skill: skill.to_string(),
                    transport: transport.to_string(),
                    kind: kind.code().to_string(),
                })
                .inc();
        }
        count.inc();
    }

    /// Takes the runs record's totals for the next [`Metrics::render`].
    pub fn runs(&self, recorded: u64, dropped: u64) {
        self.runs_recorded
            .inner()
            .store(recorded, Ordering::Relaxed);
        self.runs_dropped.inner().store(dropped, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
