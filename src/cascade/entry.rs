//! Middleware chain entries: `{ name, args, before?, after?, remove? }`, plus the phase sentinels.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::context::Context;
use crate::error::{Result, SkillError};

/// The six phase sentinels, in chain order. They order entries but never run.
pub const PHASES: [&str; 6] = [
    "$pre-configure",
    "$configure",
    "$post-configure",
    "$pre-execute",
    "$execute",
    "$post-execute",
];

/// Ordering constraints: names of entries or phase sentinels.
pub type Names = Arc<[Arc<str>]>;

/// A programmatic entry: called directly with the served context, not through the orchestrator.
pub type EntryFn = Arc<dyn Fn(Context) -> BoxFuture<'static, Result<Option<Value>>> + Send + Sync>;

#[derive(Clone)]
pub enum EntryKind {
    /// A tool invoked through the orchestrator with `target` set to the served context.
    Tool,
    /// The served tool's own body (when the cascade has no `execute` to run it).
    Body,
    /// A phase sentinel: kept in the chain so injection can re-sort against it.
    Sentinel,
    /// Code called directly (injected continuations, programmatic entries).
    Fn(EntryFn),
}

#[derive(Clone)]
pub struct Entry {
    pub name: Arc<str>,
    pub args: Arc<Value>,
    pub before: Names,
    pub after: Names,
    pub kind: EntryKind,
    /// Injected by a directive (runs after every metadata middleware, in document order).
    pub directive: bool,
    /// The middleware has nothing to do for the tool whose chain this is (decided when the
    /// chain was resolved, see `IdleWhen`): the orchestrator steps over it.
    pub idle: bool,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            EntryKind::Tool => "tool",
            EntryKind::Body => "body",
            EntryKind::Sentinel => "sentinel",
            EntryKind::Fn(_) => "fn",
        };
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("kind", &kind)
            .field("before", &self.before)
            .field("after", &self.after)
            .finish()
    }
}

impl Entry {
    pub fn tool(name: impl Into<Arc<str>>, args: Arc<Value>) -> Entry {
        Entry {
            name: name.into(),
            args,
            before: Arc::from([]),
            after: Arc::from([]),
            kind: EntryKind::Tool,
            directive: false,
            idle: false,
        }
    }

    pub fn sentinel(name: &str) -> Entry {
        Entry {
            kind: EntryKind::Sentinel,
            ..Entry::tool(name, Arc::new(Value::Null))
        }
    }

    /// The constraint every entry without `$order` gets: inside the configure phase.
    pub fn with_default_order(mut self) -> Entry {
        self.after = Arc::from([Arc::from("$configure")]);
        self.before = Arc::from([Arc::from("$post-configure")]);
        self
    }

    pub fn has_constraints(&self) -> bool {
        !self.before.is_empty() || !self.after.is_empty()
    }

    pub fn is_sentinel(&self) -> bool {
        matches!(self.kind, EntryKind::Sentinel)
    }

    /// The serializable form (programmatic functions are dropped).
    pub fn to_json(&self) -> Value {
        json!({
            "name": &*self.name,
            "args": &*self.args,
            "before": self.before.iter().map(|s| &**s).collect::<Vec<_>>(),
            "after": self.after.iter().map(|s| &**s).collect::<Vec<_>>(),
        })
    }
}

/// Reads `before`/`after` from an `$order`-style object: `{ before: [..] | "x", after: .. }`.
pub fn constraints(spec: &Value, what: &str) -> Result<(Names, Names)> {
    let Value::Object(map) = spec else {
        return Err(SkillError::config(format!(
            "{what}: ordering must be an object with `before`/`after`, found {spec}"
        )));
    };
    Ok((names(map, "before", what)?, names(map, "after", what)?))
}

fn names(map: &Map<String, Value>, key: &str, what: &str) -> Result<Names> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(Arc::from([])),
        Some(Value::String(s)) => Ok(Arc::from([Arc::from(s.as_str())])),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str().map(Arc::from).ok_or_else(|| {
                    SkillError::config(format!("{what}: `{key}` must list names, found {i}"))
                })
            })
            .collect(),
        Some(other) => Err(SkillError::config(format!(
            "{what}: `{key}` must be a name or a list of names, found {other}"
        ))),
    }
}

/// Parses extra middleware given in a context seed or to `inject`: an object keyed by name
/// (`{ name: { args, before, after, remove } }`) or an array of `{ name, ... }` entries.
pub fn parse_extra(value: &Value) -> Result<Vec<(Entry, bool)>> {
    let specs: Vec<(String, &Value)> = match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                let name = item.get("name").and_then(Value::as_str).ok_or_else(|| {
                    SkillError::config(format!("middleware entry needs a `name`: {item}"))
                })?;
                Ok((name.to_string(), item))
            })
            .collect::<Result<_>>()?,
        Value::Null => Vec::new(),
        other => {
            return Err(SkillError::config(format!(
                "middleware must be an object keyed by name or a list of entries, found {other}"
            )));
        }
    };
    specs
        .into_iter()
        .map(|(name, spec)| {
            let what = format!("middleware `{name}`");
            let mut entry = Entry::tool(name.as_str(), Arc::new(Value::Null));
            let mut remove = false;
            if let Value::Object(map) = spec {
                if let Some(args) = map.get("args") {
                    entry.args = Arc::new(args.clone());
                }
                remove = map.get("remove").and_then(Value::as_bool).unwrap_or(false);
                let (before, after) = constraints(spec, &what)?;
                entry.before = before;
                entry.after = after;
            } else if !spec.is_null() {
                entry.args = Arc::new(spec.clone());
            }
            Ok((entry, remove))
        })
        .collect()
}
