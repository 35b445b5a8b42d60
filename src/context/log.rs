//! Log events: a ring buffer shared by the process, read per run, with per-run settings.
//!
//! `ctx.log` stamps every event with the run's `rootContextId`, so `tail` only ever sees events
//! of the run it is called from. `configure` changes the level, tag scope and reporters of the
//! current run, or of the whole process with `global: true`.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::Arc;

use crate::context::tap::{Tap, Taps};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::{Result, SkillError};

/// Severity, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "error" => Level::Error,
            "warn" | "warning" => Level::Warn,
            "info" => Level::Info,
            "debug" => Level::Debug,
            "trace" => Level::Trace,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }
}

/// Where events that pass the filter are written.
pub const REPORTERS: [&str; 3] = ["stderr", "json", "tracing"];

/// Level, tag scope and reporters of a run or of the process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogConfig {
    pub level: Level,
    /// Only events whose tag is listed reach reporters; `None` lets every tag through.
    pub scope: Option<Vec<String>>,
    pub reporters: Vec<String>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: Level::Warn,
            scope: None,
            reporters: vec!["tracing".into()],
        }
    }
}

/// Process-wide store of log events.
pub struct LogHub {
    ring: Mutex<VecDeque<Arc<Value>>>,
    capacity: usize,
    global: RwLock<LogConfig>,
    /// Per-run settings, by the id of the run's root context; removed when that context goes.
    runs: Mutex<HashMap<u64, LogConfig>>,
    /// Runs whose log events are streamed as they are logged (a gateway's streaming client).
    taps: Arc<Taps<u64, Arc<Value>>>,
}

impl LogHub {
    pub fn new(capacity: usize, config: LogConfig) -> LogHub {
        LogHub {
            ring: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
            capacity: capacity.max(1),
            global: RwLock::new(config),
            runs: Mutex::new(HashMap::new()),
            taps: Taps::new(),
        }
    }

    /// Normalises `event` (a string or an object), stamps it, stores it and reports it.
    /// `run` is the id of the run's root context (whose per-run settings apply).
    pub fn log(&self, run: u64, event: &Value, stamp: Map<String, Value>) -> Result<Arc<Value>> {
        let mut map = match event {
            Value::String(text) => {
                let mut m = Map::new();
                m.insert("text".into(), json!(text));
                m
            }
            Value::Object(m) => m.clone(),
            other => {
                return Err(SkillError::failed(format!(
                    "log takes a string or an event object, got {other}"
                )));
            }
        };
        map.entry("type").or_insert_with(|| json!("message"));
        map.entry("tag").or_insert_with(|| json!("user"));
        let level = match map.get("level").and_then(Value::as_str) {
            None => Level::Error,
            Some(s) => Level::parse(s)
                .ok_or_else(|| SkillError::failed(format!("unknown log level `{s}`")))?,
        };
        map.insert("level".into(), json!(level.as_str()));
        for (k, v) in stamp {
            map.insert(k, v);
        }
        let event = Arc::new(Value::Object(map));
        {
            let mut ring = self.ring.lock();
            if ring.len() == self.capacity {
                ring.pop_front();
            }
            ring.push_back(event.clone());
        }
        let config = self.effective(run);
        if passes(&config, level, &event) {
            report(&config, level, &event);
        }
        self.taps.deliver(&run, &event);
        Ok(event)
    }

    /// Recent events of run `root`, oldest first. `opts`: `tag`, `type` (one or a list), `last`.
    pub fn tail(&self, root: &str, opts: &Value) -> Vec<Value> {
        let tag = opts.get("tag").and_then(Value::as_str);
        let types: Option<Vec<&str>> = match opts.get("type") {
            Some(Value::String(s)) => Some(vec![s.as_str()]),
            Some(Value::Array(items)) => Some(items.iter().filter_map(Value::as_str).collect()),
            _ => None,
        };
        let last = opts
            .get("last")
            .and_then(Value::as_u64)
            .map_or(usize::MAX, |n| n as usize);
        let ring = self.ring.lock();
        let mut out: Vec<Value> = ring
            .iter()
            .rev()
            .filter(|e| e.get("rootContextId").and_then(Value::as_str) == Some(root))
            .filter(|e| tag.is_none_or(|t| e.get("tag").and_then(Value::as_str) == Some(t)))
            .filter(|e| {
                types.as_ref().is_none_or(|ts| {
                    e.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| ts.contains(&t))
                })
            })
            .take(last)
            .map(|e| (**e).clone())
            .collect();
        out.reverse();
        out
    }

    /// Reads (`opts` null) or changes the settings of run `run` (the id of its root context),
    /// or the global ones.
    pub fn configure(&self, run: u64, opts: &Value) -> Result<Value> {
        let global = opts.get("global").and_then(Value::as_bool).unwrap_or(false);
        let mut config = if global {
            self.global.read().clone()
        } else {
            self.effective(run)
        };
        if let Some(level) = opts.get("level") {
            let name = level.as_str().unwrap_or_default();
            config.level = Level::parse(name)
                .ok_or_else(|| SkillError::failed(format!("unknown log level {level}")))?;
        }
        match opts.get("scope") {
            None => {}
            Some(Value::Null) => config.scope = None,
            Some(Value::Array(tags)) => {
                config.scope = Some(
                    tags.iter()
                        .filter_map(|t| t.as_str().map(str::to_string))
                        .collect(),
                );
            }
            Some(other) => {
                return Err(SkillError::failed(format!(
                    "log scope must be a list of tags, got {other}"
                )));
            }
        }
        if let Some(reporter) = opts.get("reporter") {
            let names: Vec<String> = match reporter {
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            };
            for name in &names {
                if !REPORTERS.contains(&name.as_str()) {
                    return Err(SkillError::failed(format!(
                        "unknown reporter `{name}` (known: {})",
                        REPORTERS.join(", ")
                    )));
                }
            }
            config.reporters = names;
        }
        let changed = opts
            .as_object()
            .is_some_and(|m| m.keys().any(|k| k != "global"));
        if changed {
            if global {
                *self.global.write() = config.clone();
            } else {
                self.runs.lock().insert(run, config.clone());
            }
        }
        Ok(json!({ "level": config.level, "scope": config.scope, "reporters": config.reporters }))
    }

    /// Drops the settings of a run that ended.
    pub fn end_run(&self, run: u64) {
        let mut runs = self.runs.lock();
        if !runs.is_empty() {
            runs.remove(&run);
        }
    }

    /// How many runs hold settings of their own (each is removed when its run ends).
    pub fn configured_runs(&self) -> usize {
        self.runs.lock().len()
    }

    /// Calls `f` with each log event of the run whose root context is `run`, as it is logged,
    /// until the returned tap is dropped.
    pub fn tap_run(
        &self,
        run: u64,
        f: impl Fn(&Arc<Value>) + Send + Sync + 'static,
    ) -> Tap<u64, Arc<Value>> {
        self.taps.tap(run, Arc::new(f))
    }

    pub fn set_global(&self, config: LogConfig) {
        *self.global.write() = config;
    }

    fn effective(&self, run: u64) -> LogConfig {
        {
            let runs = self.runs.lock();
            if let Some(config) = runs.get(&run) {
                return config.clone();
            }
        }
        self.global.read().clone()
    }
}

fn passes(config: &LogConfig, level: Level, event: &Value) -> bool {
    level <= config.level
        && config.scope.as_ref().is_none_or(|scope| {
            event
                .get("tag")
                .and_then(Value::as_str)
                .is_some_and(|t| scope.iter().any(|s| s == t))
        })
}

fn report(config: &LogConfig, level: Level, event: &Value) {
    for reporter in &config.reporters {
        match reporter.as_str() {
            "stderr" => {
                let text = event
                    .get("text")
                    .and_then(Value::as_str)
                    .map_or_else(|| event.to_string(), str::to_string);
                let tool = event.get("tool").and_then(Value::as_str).unwrap_or("-");
                let _ = writeln!(std::io::stderr(), "[{}] {tool}: {text}", level.as_str());
            }
            "json" => {
                let _ = writeln!(std::io::stderr(), "{event}");
            }
            _ => match level {
                Level::Error => tracing::error!(target: "skillgate::log", event = %event),
                Level::Warn => tracing::warn!(target: "skillgate::log", event = %event),
                Level::Info => tracing::info!(target: "skillgate::log", event = %event),
                Level::Debug => tracing::debug!(target: "skillgate::log", event = %event),
                Level::Trace => tracing::trace!(target: "skillgate::log", event = %event),
            },
        }
    }
}
