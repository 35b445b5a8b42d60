//! `get(path)` and `set(path, value)` by dotted path, enforcing each property's mutability.
//!
//! | path | rule |
//! |---|---|
//! | `envelope.*` | immutable |
//! | `args`, `args.*` | set once, at creation |
//! | `locals.history` | append-only (`push_history`) |
//! | `run.signal`, `run.interactive` | immutable |
//! | `run.tool.*` | closed: only the declaration keys |
//! | everything else under `locals`, `nonlocals`, `globals`, `run` | mutable |

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::context::{Context, State, path};
use crate::error::{Result, SkillError};
use crate::skills::tool::DECL_KEYS;

/// What untrusted code's own `globals` start as: the process's `config` (copied), empty
/// `tools` and `cache`.
fn fresh_globals(kernel: &crate::kernel::Kernel) -> Map<String, Value> {
    let mut own = Map::new();
    let config = kernel.globals().read().get("config").cloned();
    own.insert("config".into(), config.unwrap_or_else(|| json!({})));
    own.insert("tools".into(), json!({}));
    own.insert("cache".into(), json!({}));
    own
}

impl Context {
    /// A copy of this context's own `globals` when its code is untrusted (see `State`).
    pub(crate) fn own_globals(&self) -> Option<Map<String, Value>> {
        let mut state = self.0.state.lock();
        if !state.locals.untrusted_ref {
            return None;
        }
        let kernel = &self.0.kernel;
        Some(Map::clone(
            state
                .own_globals
                .get_or_insert_with(|| Box::new(fresh_globals(kernel))),
        ))
    }

    /// Reads a property by dotted path (`locals.config.cwd`); `None` when absent.
    pub fn get(&self, dotted: &str) -> Result<Option<Value>> {
        let segments = path::split(dotted).map_err(SkillError::failed)?;
        let (head, rest) = segments.split_first().expect("split never returns nothing");
        let whole = match *head {
            "envelope" => return Ok(self.envelope_get(rest)),
            "args" => return Ok(path::get(&self.0.args, rest).cloned()),
            "globals" => {
                if let Some(own) = self.own_globals() {
                    return Ok(path::get_map(&own, rest));
                }
                let globals = self.0.kernel.globals().read();
                return Ok(path::get_map(&globals, rest));
            }
            "locals" | "nonlocals" | "run" => {
                let state = self.0.state.lock();
                match *head {
                    "locals" => locals_get(self, &state, rest),
                    "nonlocals" => return Ok(path::get_map(&state.nonlocals, rest)),
                    _ => run_get(self, &state, rest),
                }
            }
            other => {
                return Err(SkillError::failed(format!(
                    "unknown context property `{other}` (envelope, args, locals, nonlocals, globals, run)"
                )));
            }
        };
        Ok(whole)
    }

    fn envelope_get(&self, rest: &[&str]) -> Option<Value> {
        let whole = match rest.first() {
            None => json!({
                "id": self.id(),
                "parent": self.parent().map(|p| p.id()),
                "target": self.target().id(),
                "hasOtherTarget": self.has_other_target(),
            }),
            Some(&"id") => json!(self.id()),
            Some(&"parent") => match self.parent() {
                Some(p) => p.to_json(),
                None => Value::Null,
            },
            Some(&"target") => self.target().to_json(),
            Some(&"hasOtherTarget") => json!(self.has_other_target()),
            Some(_) => return None,
        };
        let skip = usize::from(!rest.is_empty());
        path::get(&whole, &rest[skip..]).cloned()
    }

    /// Writes a property by dotted path, refusing writes the spec forbids.
    pub fn set(&self, dotted: &str, value: Value) -> Result<()> {
        let segments = path::split(dotted).map_err(SkillError::failed)?;
        let (head, rest) = segments.split_first().expect("split never returns nothing");
        match *head {
            "envelope" => Err(Context::immutable(&format!("`{dotted}` is immutable"))),
            "args" => Err(Context::immutable(&format!(
                "`{dotted}`: args are set once, when the context is created"
            ))),
            "globals" => {
                {
                    let mut state = self.0.state.lock();
                    if state.locals.untrusted_ref {
                        let kernel = &self.0.kernel;
                        let own = state
                            .own_globals
                            .get_or_insert_with(|| Box::new(fresh_globals(kernel)));
                        return set_map(own, rest, value, dotted);
                    }
                }
                let written = {
                    let mut globals = self.0.kernel.globals().write();
                    set_map(&mut globals, rest, value, dotted)
                };
                self.0.kernel.globals_changed();
                written
            }
            "locals" => self.locals_set(rest, value, dotted),
            "nonlocals" => {
                let mut state = self.0.state.lock();
                set_map(Arc::make_mut(&mut state.nonlocals), rest, value, dotted)
            }
            "run" => self.run_set(rest, value, dotted),
            other => Err(SkillError::failed(format!(
                "unknown context property `{other}` (envelope, args, locals, nonlocals, globals, run)"
            ))),
        }
    }

    fn locals_set(&self, rest: &[&str], value: Value, dotted: &str) -> Result<()> {
        let (key, below) = keys_below("locals", rest)?;
        let mut state = self.0.state.lock();
        let locals = &mut state.locals;
        match key {
            "history" => Err(Context::immutable(&format!(
                "`{dotted}`: history is append-only"
            ))),
            "result" => {
                let mut current = locals.result.as_deref().cloned().unwrap_or(Value::Null);
                path::set(&mut current, below, value).map_err(SkillError::failed)?;
                locals.result = Some(Arc::new(current));
                Ok(())
            }
            "error" => {
                let mut current = locals.error.as_ref().map_or(Value::Null, |e| e.to_json());
                path::set(&mut current, below, value).map_err(SkillError::failed)?;
                locals.error = (!current.is_null()).then(|| SkillError::from_json(&current));
                Ok(())
            }
            "config" => path::set(Arc::make_mut(&mut locals.config), below, value)
                .map_err(SkillError::failed),
            "prompt" => {
                let prompt = locals
                    .prompt
                    .get_or_insert_with(|| Arc::new(json!({"raw": "", "expanded": ""})));
                path::set(Arc::make_mut(prompt), below, value).map_err(SkillError::failed)
            }
            "internals" => {
                if below == ["untrustedRef"] {
                    locals.untrusted_ref = value.as_bool().unwrap_or(false);
                    return Ok(());
                }
                set_map(
                    locals.internals.get_or_insert_with(Box::default),
                    below,
                    value,
                    dotted,
                )
            }
            _ => set_map(
                locals.other.get_or_insert_with(Box::default),
                rest,
                value,
                dotted,
            ),
        }
    }

    fn run_set(&self, rest: &[&str], value: Value, dotted: &str) -> Result<()> {
        let (key, below) = keys_below("run", rest)?;
        let mut state = self.0.state.lock();
        let run = &mut state.run;
        match key {
            "signal" | "interactive" => {
                Err(Context::immutable(&format!("`{dotted}` is immutable")))
            }
            "origin" => {
                path::set(Arc::make_mut(&mut run.origin), below, value).map_err(SkillError::failed)
            }
            "middleware" => path::set(Arc::make_mut(&mut run.middleware), below, value)
                .map_err(SkillError::failed),
            "tool" => {
                match below.first() {
                    Some(k) if !DECL_KEYS.contains(k) => {
                        return Err(SkillError::failed(format!(
                            "`run.tool` is closed: no key `{k}` (keys: {})",
                            DECL_KEYS.join(", ")
                        )));
                    }
                    None => {
                        if let Some(bad) = value
                            .as_object()
                            .and_then(|m| m.keys().find(|k| !DECL_KEYS.contains(&k.as_str())))
                        {
                            return Err(SkillError::failed(format!(
                                "`run.tool` is closed: no key `{bad}`"
                            )));
                        }
                    }
                    _ => {}
                }
                path::set(Arc::make_mut(&mut run.tool), below, value).map_err(SkillError::failed)
            }
            other => Err(SkillError::failed(format!(
                "`run` has no property `{other}` (origin, middleware, tool, signal, interactive)"
            ))),
        }
    }
}

fn locals_get(ctx: &Context, state: &State, rest: &[&str]) -> Option<Value> {
    let locals = &state.locals;
    let Some((key, below)) = rest.split_first() else {
        return Some(locals_json(ctx, state));
    };
    let holder;
    let value: &Value = match *key {
        "result" => locals.result.as_deref()?,
        "error" => {
            holder = locals.error.as_ref()?.to_json();
            &holder
        }
        "history" => {
            holder = crate::context::history::to_json(ctx, state);
            &holder
        }
        "config" => &locals.config,
        "prompt" => locals.prompt.as_deref()?,
        "internals" => {
            holder = internals_json(state);
            &holder
        }
        _ => return path::get_map(locals.other.as_deref()?, rest),
    };
    path::get(value, below).cloned()
}

pub(crate) fn internals_json(state: &State) -> Value {
    let mut map = state
        .locals
        .internals
        .as_deref()
        .cloned()
        .unwrap_or_default();
    if state.locals.untrusted_ref {
        map.insert("untrustedRef".into(), Value::Bool(true));
    }
    Value::Object(map)
}

pub(crate) fn locals_json(ctx: &Context, state: &State) -> Value {
    let locals = &state.locals;
    let mut map = Map::new();
    if let Some(result) = &locals.result {
        map.insert("result".into(), (**result).clone());
    }
    if let Some(error) = &locals.error {
        map.insert("error".into(), error.to_json());
    }
    map.insert(
        "history".into(),
        crate::context::history::to_json(ctx, state),
    );
    map.insert("config".into(), (*locals.config).clone());
    if let Some(prompt) = &locals.prompt {
        map.insert("prompt".into(), (**prompt).clone());
    }
    map.insert("internals".into(), internals_json(state));
    for (k, v) in locals.other.iter().flat_map(|other| other.iter()) {
        map.insert(k.clone(), v.clone());
    }
    Value::Object(map)
}

fn run_get(ctx: &Context, state: &State, rest: &[&str]) -> Option<Value> {
    let Some((key, below)) = rest.split_first() else {
        return Some(run_json(ctx, state));
    };
    let holder;
    let value: &Value = match *key {
        "origin" => &state.run.origin,
        "middleware" => &state.run.middleware,
        "tool" => &state.run.tool,
        "signal" => {
            holder = signal_json(ctx);
            &holder
        }
        "interactive" => {
            holder = Value::Bool(ctx.0.interactive);
            &holder
        }
        _ => return None,
    };
    path::get(value, below).cloned()
}

fn signal_json(ctx: &Context) -> Value {
    match ctx.aborted() {
        Some(reason) => json!({ "aborted": true, "reason": reason }),
        None => json!({ "aborted": false }),
    }
}

pub(crate) fn run_json(ctx: &Context, state: &State) -> Value {
    json!({
        "origin": &*state.run.origin,
        "middleware": &*state.run.middleware,
        "tool": &*state.run.tool,
        "signal": signal_json(ctx),
        "interactive": ctx.0.interactive,
    })
}

fn set_map(map: &mut Map<String, Value>, rest: &[&str], value: Value, dotted: &str) -> Result<()> {
    let Some((key, below)) = rest.split_first() else {
        return match value {
            Value::Object(new) => {
                *map = new;
                Ok(())
            }
            other => Err(SkillError::failed(format!(
                "`{dotted}` must be an object, got {}",
                path::kind(&other)
            ))),
        };
    };
    let slot = map.entry((*key).to_string()).or_insert(Value::Null);
    if below.is_empty() {
        *slot = value;
        return Ok(());
    }
    path::set(slot, below, value).map_err(|e| SkillError::failed(format!("`{dotted}`: {e}")))
}

/// The key `rest` names in `whole` (`locals`, `run`) and the keys below it: `whole` itself
/// cannot be replaced.
fn keys_below<'a>(whole: &str, rest: &'a [&'a str]) -> Result<(&'a str, &'a [&'a str])> {
    match rest.split_first() {
        Some((key, below)) => Ok((key, below)),
        None => Err(SkillError::failed(format!(
            "`{whole}` cannot be replaced as a whole; set its keys"
        ))),
    }
}
