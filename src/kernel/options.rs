//! Invoke options, the context seed, tool references, and `$NAME` extraction from args.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::error::{ErrorKind, Result, SkillError};
use crate::skills::tool::Tool;

/// What to invoke: a tool name, a path to a skill file, or a definition held in memory.
#[derive(Clone, Debug)]
pub enum ToolRef {
    Name(Arc<str>),
    Def(Arc<Tool>),
}

impl From<&str> for ToolRef {
    fn from(s: &str) -> Self {
        ToolRef::Name(Arc::from(s))
    }
}

impl From<String> for ToolRef {
    fn from(s: String) -> Self {
        ToolRef::Name(Arc::from(s))
    }
}

impl From<Arc<Tool>> for ToolRef {
    fn from(t: Arc<Tool>) -> Self {
        ToolRef::Def(t)
    }
}

impl ToolRef {
    /// True for a bare tool name (`[a-z0-9-]`), the only form untrusted code may invoke.
    pub fn is_bare_name(&self) -> bool {
        matches!(self, ToolRef::Name(n) if crate::skills::frontmatter::is_tool_name(n))
    }

    /// The skill's name: the bare name, or the name of the definition.
    pub fn name(&self) -> &str {
        match self {
            ToolRef::Name(n) => n,
            ToolRef::Def(t) => &t.name,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ToolRef::Name(n) => n.to_string(),
            ToolRef::Def(t) => format!("<{}>", t.name),
        }
    }
}

/// `options.context`: any context property to overlay on the new context.
#[derive(Default, Clone)]
pub struct ContextSeed {
    /// Overrides the parent (default: the invoking context).
    pub parent: Option<Context>,
    /// The served context (chain entries); default: the new context itself.
    pub target: Option<Context>,
    /// An outside cancellation signal composed into the new context's signal.
    pub signal: Option<CancellationToken>,
    pub locals: Map<String, Value>,
    pub nonlocals: Map<String, Value>,
    pub run: Map<String, Value>,
    /// A context id taken in advance with `context::id::next_id()`, so a caller (a gateway
    /// following a run's logs) knows `rootContextId` before the run starts.
    pub id: Option<u64>,
    /// Non-JSON values to store on the new context (see `Context::set_extension`), each under
    /// its path (a constant's is not copied).
    pub extensions: Vec<(Cow<'static, str>, Arc<dyn std::any::Any + Send + Sync>)>,
    /// For a root: how deep the run that caused this one was (an event handler run continues
    /// the depth of the run that emitted its event), so loops through the bus are bounded too.
    pub depth: Option<u32>,
    /// For a root: the budget of the run that caused this one (an event handler joins the
    /// budget of the run that emitted its event while that run is alive; see `kernel::budget`).
    pub budget: Option<u64>,
}

impl ContextSeed {
    /// Fills fields missing here from a JSON seed (`$context` in args): never overwrites.
    pub fn fill_from_json(&mut self, seed: &Value) -> Result<()> {
        let Value::Object(map) = seed else {
            return Err(SkillError::new(
                ErrorKind::InvalidArgs,
                format!("`$context` must be an object, got {seed}"),
            ));
        };
        for (key, value) in map {
            let target = match key.as_str() {
                "locals" => &mut self.locals,
                "nonlocals" => &mut self.nonlocals,
                "run" => &mut self.run,
                // `$context.middleware` is shorthand for non-cascading extra middleware.
                "middleware" => {
                    self.locals
                        .entry("middleware")
                        .or_insert_with(|| value.clone());
                    continue;
                }
                "envelope" | "parent" | "target" | "signal" | "args" | "globals" => continue,
                other => {
                    return Err(SkillError::new(
                        ErrorKind::InvalidArgs,
                        format!("`$context.{other}` is not a context property"),
                    ));
                }
            };
            let Value::Object(fields) = value else {
                return Err(SkillError::new(
                    ErrorKind::InvalidArgs,
                    format!("`$context.{key}` must be an object"),
                ));
            };
            fill(target, fields);
        }
        Ok(())
    }
}

/// Adds missing keys; where both sides hold objects, fills inside them too.
fn fill(target: &mut Map<String, Value>, source: &Map<String, Value>) {
    for (key, value) in source {
        match (target.get_mut(key), value) {
            (None, _) => {
                target.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(inner)), Value::Object(more)) => fill(inner, more),
            _ => {}
        }
    }
}

/// Options of `invoke(ref, args, options)`.
#[derive(Default, Clone)]
pub struct InvokeOptions {
    pub context: ContextSeed,
    /// Fire and forget: do not wait, swallow errors.
    pub detached: bool,
    /// The authority to name the tool under. For a root: who the run is for (default: the
    /// project). Below a root it can only narrow what the invoking code has (a native tool
    /// invoking a ref from its args passes its own invoker's authority); the principal never
    /// changes.
    pub authority: Option<crate::kernel::authority::Authority>,
}

impl InvokeOptions {
    pub fn detached() -> Self {
        InvokeOptions {
            detached: true,
            ..Default::default()
        }
    }

    /// Options naming the tool under `authority`.
    pub fn as_authority(authority: crate::kernel::authority::Authority) -> Self {
        InvokeOptions {
            authority: Some(authority),
            ..Default::default()
        }
    }
}

/// True for a key the kernel interprets as an invoke directive.
pub fn is_directive(key: &str) -> bool {
    crate::kernel::authority::DIRECTIVE_KEYS.contains(&key)
}

/// Step 1: moves the directive keys of `args` into `options`. Explicit options win; a `$NAME`
/// object only fills what they leave missing.
pub fn extract_dollar_keys(args: Value, options: &mut InvokeOptions) -> Result<Value> {
    let Value::Object(map) = args else {
        return Ok(args);
    };
    if !map.keys().any(|k| is_directive(k)) {
        return Ok(Value::Object(map));
    }
    let mut clean = Map::with_capacity(map.len());
    for (key, value) in map {
        match key.as_str() {
            "$context" => options.context.fill_from_json(&value)?,
            "$detached" => options.detached |= value.as_bool().unwrap_or(false),
            // Other `$` keys (`$schema`, `$gt`) are plain data.
            _ => {
                clean.insert(key, value);
            }
        }
    }
    Ok(Value::Object(clean))
}
