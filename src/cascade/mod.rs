//! The metadata cascade: from a tool to its merged metadata, its hooks and its sorted chain.
//!
//! Levels, lowest first: the default pipeline (the base of every inherit chain), the skills
//! marked `$global: true` (public keys only; not for native tools, nor for a tool that says
//! `$global: false`), the tool's authorities (outermost project first, public keys only), the
//! rest of its C3-linearized
//! inherit chain (public keys only), the tool's own keys, then command-line overrides. Each level
//! is interpolated on its own, then merged: `$remove` drops keys merged so far, `$merge` picks
//! `prepend`/`append` (arrays) or `shallow` (objects) per key, anything else replaces. Keys that
//! name a tool become chain entries unless they are `false`, the tool itself, listed in
//! `$static`, or in the tool's own strongly connected component (automatic static) and not
//! listed in `$dynamic`. Results are cached on the index slot, so a new registry generation
//! invalidates them.

pub mod entry;
pub mod interpolate;
pub mod order;
pub mod scc;

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

pub use entry::{Entry, EntryFn, EntryKind, Names, PHASES};
pub use scc::SccState;

use crate::error::{Result, SkillError};
use crate::skills::index::{SearchIndex, Slot};
use crate::skills::tool::Tool;

/// The skill that ends every inherit chain.
pub const DEFAULT_PIPELINE: &str = "default-pipeline";

/// Annotation keys that belong to one level and are never merged.
const PER_LEVEL: [&str; 5] = ["$inherit", "$private", "$remove", "$authority", "$global"];

/// Merged metadata of one tool, before automatic static.
#[derive(Debug)]
pub struct Merged {
    pub metadata: Map<String, Value>,
    /// Keys naming a tool that are candidates for the chain.
    pub tool_keys: Vec<String>,
    /// Some value still holds a context variable to interpolate at invocation.
    pub dynamic: bool,
}

/// Everything the orchestrator needs to run a tool's pipeline.
#[derive(Debug)]
pub struct Resolved {
    /// `run.middleware`.
    pub metadata: Arc<Value>,
    /// The sorted chain, sentinels included.
    pub entries: Arc<Vec<Entry>>,
    pub invoke_hooks: Arc<Vec<Entry>>,
    pub next_hooks: Arc<Vec<Entry>>,
    pub dynamic: bool,
}

/// The merged metadata of `name` in `index`, cached.
pub fn merged(index: &SearchIndex, name: &str) -> Result<Arc<Merged>> {
    let tool = index.find(name)?;
    merged_for(index, tool)
}

/// The merged metadata of `tool`: cached when it is the tool `index` holds under its name.
pub fn merged_for(index: &SearchIndex, tool: &Arc<Tool>) -> Result<Arc<Merged>> {
    cached(index, tool, |slot| &slot.merged, compute_merged)
}

/// The resolved pipeline of `tool`: cached when it is the tool `index` holds under its name.
pub fn resolved_for(index: &SearchIndex, tool: &Arc<Tool>) -> Result<Arc<Resolved>> {
    cached(index, tool, |slot| &slot.resolved, compute_resolved)
}

/// `compute` of `tool`, kept in the `cell` of its slot when it is the tool `index` holds under
/// its name (a tool from elsewhere, a callback or a file path, is computed each time).
fn cached<T>(
    index: &SearchIndex,
    tool: &Arc<Tool>,
    cell: impl FnOnce(&Slot) -> &OnceLock<Result<Arc<T>>>,
    compute: impl FnOnce(&SearchIndex, &Arc<Tool>) -> Result<T>,
) -> Result<Arc<T>> {
    let slot = index
        .slot(&tool.name)
        .filter(|s| Arc::ptr_eq(&s.tool, tool));
    match slot {
        Some(slot) => cell(slot)
            .get_or_init(|| compute(index, tool).map(Arc::new))
            .clone(),
        None => compute(index, tool).map(Arc::new),
    }
}

/// Keys whose values may not depend on the invocation: spawn and secret settings, which come
/// from project files only. A `${args.x}` there would let a caller pick the command an MCP
/// server starts or the URL its headers go to (`mcp`), the URL a model's API key is sent to and
/// the variable it is read from (`model`), or the folders tools and files are read from
/// (`paths`, `workspace`, `cwd`), or the topics and skills the project subscribes (`event`,
/// `observe`).
pub const FIXED_KEYS: [&str; 7] = [
    "mcp",
    "model",
    "paths",
    "workspace",
    "cwd",
    "event",
    "observe",
];

fn compute_merged(index: &SearchIndex, tool: &Arc<Tool>) -> Result<Merged> {
    let project = index
        .dirs
        .first()
        .and_then(|d| d.parent())
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut acc = Map::new();
    let mut dynamic = false;
    for level in levels(index, tool)? {
        let mut values = (*level.tool.metadata).clone();
        if !level.own {
            strip_private(&mut values);
        }
        let dir = level.tool.dir().map(|d| d.display().to_string());
        let vars = interpolate::LevelVars {
            dir: dir.as_deref(),
            name: &level.tool.name,
            project: &project,
        };
        let mut as_value = Value::Object(values);
        let what = format!(
            "metadata of `{}` ({})",
            level.tool.name,
            level.tool.location()
        );
        for key in FIXED_KEYS {
            if let Some(value) = as_value.get(key)
                && interpolate::level_pass(&mut value.clone(), &vars, &what)?
            {
                return Err(SkillError::config(format!(
                    "{what}: `{key}` cannot use per-invocation variables (`${{args.*}}`, `${{locals.*}}`, ...): what it starts or connects to is fixed per skill; `${{env.NAME}}`, `${{dir}}` and `${{project}}` are allowed"
                )));
            }
        }
        dynamic |= interpolate::level_pass(&mut as_value, &vars, &what)?;
        let Value::Object(values) = as_value else {
            unreachable!("an object stays an object")
        };
        merge_level(&mut acc, values);
    }
    if !index.overrides.is_empty() {
        merge_level(&mut acc, (*index.overrides).clone());
    }
    let is_static = |key: &str| match acc.get("$static") {
        Some(Value::Bool(true)) => true,
        Some(Value::Array(items)) => items.iter().any(|i| i.as_str() == Some(key)),
        _ => false,
    };
    let tool_keys = acc
        .iter()
        .filter(|(k, v)| {
            !k.starts_with('$')
                && **v != Value::Bool(false)
                && k.as_str() != tool.name
                && index.contains(k)
                && !is_static(k)
        })
        .map(|(k, _)| k.clone())
        .collect();
    Ok(Merged {
        metadata: acc,
        tool_keys,
        dynamic,
    })
}

struct Level<'a> {
    tool: &'a Arc<Tool>,
    own: bool,
}

/// Levels lowest first (command-line overrides excluded).
fn levels<'a>(index: &'a SearchIndex, tool: &'a Arc<Tool>) -> Result<Vec<Level<'a>>> {
    let lin = linearize(index, tool, &mut Vec::new())?;
    let mut authorities = Vec::new();
    let mut seen: HashSet<&str> = lin.iter().map(String::as_str).collect();
    let mut current = index.authority_of(tool);
    while let Some(authority) = current {
        if !seen.insert(authority.name.as_str()) {
            break;
        }
        authorities.push(authority);
        current = index.authority_of(authority);
    }
    authorities.reverse();
    let globals: Vec<&Arc<Tool>> = index
        .globals_for(tool)
        .filter(|g| seen.insert(g.name.as_str()))
        .collect();
    let mut out = Vec::with_capacity(lin.len() + authorities.len() + globals.len());
    let mut ancestors: Vec<&String> = lin[1..].iter().rev().collect();
    if ancestors
        .first()
        .is_some_and(|n| n.as_str() == DEFAULT_PIPELINE)
    {
        let default = ancestors.remove(0);
        out.push(level_of(index, default)?);
    }
    out.extend(globals.into_iter().map(|tool| Level { tool, own: false }));
    out.extend(
        authorities
            .into_iter()
            .map(|tool| Level { tool, own: false }),
    );
    for name in ancestors {
        out.push(level_of(index, name)?);
    }
    out.push(Level { tool, own: true });
    Ok(out)
}

fn level_of<'a>(index: &'a SearchIndex, name: &str) -> Result<Level<'a>> {
    Ok(Level {
        tool: index.find(name)?,
        own: false,
    })
}

/// Parents named by `$inherit`, with the default pipeline appended unless `$inherit: false`.
fn parents(index: &SearchIndex, tool: &Tool) -> Result<Vec<String>> {
    let mut out: Vec<String> = match tool.metadata.get("$inherit") {
        Some(Value::Bool(false)) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    for parent in &out {
        if !index.contains(parent) {
            let err = index
                .find(parent)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            return Err(SkillError::config(format!(
                "`$inherit` of `{}` ({}): {err}",
                tool.name,
                tool.location()
            )));
        }
    }
    if tool.name != DEFAULT_PIPELINE
        && !out.iter().any(|p| p == DEFAULT_PIPELINE)
        && index.contains(DEFAULT_PIPELINE)
    {
        out.push(DEFAULT_PIPELINE.to_string());
    }
    Ok(out)
}

/// C3 linearization of the inherit graph: `[tool, ..., default-pipeline]`.
fn linearize(index: &SearchIndex, tool: &Tool, visiting: &mut Vec<String>) -> Result<Vec<String>> {
    let name = tool.name.as_str();
    if let Some(at) = visiting.iter().position(|v| v == name) {
        let mut cycle = visiting[at..].to_vec();
        cycle.push(name.to_string());
        return Err(
            SkillError::config(format!("`$inherit` has a cycle: {}", cycle.join(" -> ")))
                .with_data(serde_json::json!({ "cycle": cycle })),
        );
    }
    let parents = parents(index, tool)?;
    visiting.push(name.to_string());
    let mut lists = Vec::with_capacity(parents.len() + 1);
    for parent in &parents {
        lists.push(linearize(index, index.find(parent)?, visiting)?);
    }
    visiting.pop();
    lists.push(parents);
    let mut out = vec![name.to_string()];
    loop {
        lists.retain(|l| !l.is_empty());
        if lists.is_empty() {
            return Ok(out);
        }
        let head = lists
            .iter()
            .map(|l| l[0].clone())
            .find(|candidate| !lists.iter().any(|l| l[1..].contains(candidate)));
        let Some(head) = head else {
            return Err(SkillError::config(format!(
                "`$inherit` of `{name}` cannot be linearized (inconsistent parent order)"
            )));
        };
        for list in &mut lists {
            if list[0] == head {
                list.remove(0);
            }
        }
        out.push(head);
    }
}

/// Drops the keys a level keeps to itself (`$private: [keys]`).
fn strip_private(values: &mut Map<String, Value>) {
    if let Some(Value::Array(private)) = values.remove("$private") {
        for key in private.iter().filter_map(Value::as_str) {
            values.remove(key);
        }
    }
    // `$self` hook bindings describe the declaring tool, not the tools inheriting from it.
    if let Some(Value::Object(hooks)) = values.get_mut("$hook") {
        hooks.remove("$self");
    }
}

/// Merges one level onto the accumulated metadata.
fn merge_level(acc: &mut Map<String, Value>, mut level: Map<String, Value>) {
    if let Some(Value::Array(remove)) = level.get("$remove") {
        for key in remove.iter().filter_map(Value::as_str) {
            acc.shift_remove(key);
        }
    }
    if let Some(Value::Object(policies)) = level.get("$merge") {
        let target = acc
            .entry("$merge")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(target) = target {
            for (k, v) in policies {
                target.insert(k.clone(), v.clone());
            }
        }
    }
    for key in PER_LEVEL.iter().chain(["$merge"].iter()) {
        level.remove(*key);
    }
    for (key, value) in level {
        match key.as_str() {
            "$order" | "$hook" => shallow(acc, key, value),
            "$static" | "$dynamic" => union(acc, key, value),
            _ => {
                let policy = acc
                    .get("$merge")
                    .and_then(|m| m.get(&key))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                merge_key(acc, key, value, policy.as_deref());
            }
        }
    }
}

fn merge_key(acc: &mut Map<String, Value>, key: String, value: Value, policy: Option<&str>) {
    let merged = match (acc.get(&key), value, policy) {
        (Some(Value::Array(old)), Value::Array(new), Some("append")) => {
            Value::Array(old.iter().cloned().chain(new).collect())
        }
        (Some(Value::Array(old)), Value::Array(new), Some("prepend")) => {
            Value::Array(new.into_iter().chain(old.iter().cloned()).collect())
        }
        (Some(Value::Object(old)), Value::Object(new), Some("shallow")) => {
            let mut out = old.clone();
            out.extend(new);
            Value::Object(out)
        }
        (_, value, _) => value,
    };
    acc.insert(key, merged);
}

fn shallow(acc: &mut Map<String, Value>, key: String, value: Value) {
    match (acc.get_mut(&key), value) {
        (Some(Value::Object(old)), Value::Object(new)) => old.extend(new),
        (_, value) => {
            acc.insert(key, value);
        }
    }
}

fn union(acc: &mut Map<String, Value>, key: String, value: Value) {
    match (acc.get_mut(&key), value) {
        (Some(Value::Bool(true)), _) => {}
        (Some(Value::Array(old)), Value::Array(new)) => {
            for item in new {
                if !old.contains(&item) {
                    old.push(item);
                }
            }
        }
        (_, value) => {
            acc.insert(key, value);
        }
    }
}

/// Computes a tool's pipeline without consulting the slot cache (callers cache it).
pub fn resolve_uncached(index: &SearchIndex, tool: &Arc<Tool>) -> Result<Resolved> {
    compute_resolved(index, tool)
}

fn compute_resolved(index: &SearchIndex, tool: &Arc<Tool>) -> Result<Resolved> {
    let merged = merged_for(index, tool)?;
    let meta = &merged.metadata;
    let keys = demote_same_component(index, tool, &merged)?;

    // Hooks: keys whose tool declares `$hook: { $self: ... }`, plus `$hook: { name: trigger }`.
    let mut bindings: Vec<(&str, &Value, Value)> = Vec::new();
    for key in &keys {
        if let Some(declared) = index
            .get(key)
            .and_then(|t| t.metadata.get("$hook"))
            .and_then(|h| h.get("$self"))
        {
            bindings.push((key, declared, meta[key.as_str()].clone()));
        }
    }
    if let Some(Value::Object(explicit)) = meta.get("$hook") {
        for (name, triggers) in explicit {
            if name != "$self" && index.contains(name) && !bindings.iter().any(|b| b.0 == name) {
                let args = meta.get(name).cloned().unwrap_or(Value::Bool(true));
                bindings.push((name, triggers, args));
            }
        }
    }
    let mut invoke_hooks = Vec::new();
    let mut next_hooks = Vec::new();
    let mut hook_names: HashSet<String> = HashSet::new();
    for (name, triggers, args) in bindings {
        for trigger in trigger_list(triggers) {
            let entry = Entry::tool(name, Arc::new(args.clone()));
            match trigger {
                "$next" => next_hooks.push(entry),
                "$invoke" => invoke_hooks.push(entry),
                _ => continue,
            }
            hook_names.insert(name.to_string());
        }
    }

    let order = meta.get("$order").and_then(Value::as_object);
    let mut entries: Vec<Entry> = PHASES.iter().map(|p| Entry::sentinel(p)).collect();
    for key in keys.iter().filter(|k| !hook_names.contains(*k)) {
        let entry = Entry::tool(key.as_str(), Arc::new(meta[key.as_str()].clone()));
        entries.push(match order.and_then(|o| o.get(key)) {
            Some(spec) => {
                let (before, after) =
                    entry::constraints(spec, &format!("`$order` of `{key}` in `{}`", tool.name))?;
                Entry {
                    before,
                    after,
                    ..entry
                }
            }
            None => entry.with_default_order(),
        });
    }
    if !keys.iter().any(|k| k == "execute") {
        entries.push(Entry {
            kind: EntryKind::Body,
            before: Arc::from([Arc::from("$post-execute")]),
            after: Arc::from([Arc::from("$execute")]),
            ..Entry::tool(tool.name.as_str(), Arc::new(Value::Null))
        });
    }
    let mut entries = order::sort(entries)
        .map_err(|e| SkillError::config(format!("pipeline of `{}`: {e}", tool.name)))?;
    // Built-in middleware with nothing to do for this tool are stepped over, unless something
    // watches every entry (`$next` hooks) or the metadata changes per invocation.
    if next_hooks.is_empty() && !merged.dynamic {
        for entry in entries
            .iter_mut()
            .filter(|e| matches!(e.kind, EntryKind::Tool))
        {
            entry.idle = index
                .get(&entry.name)
                .and_then(|mw| mw.idle_when)
                .is_some_and(|idle| idle(meta, tool));
        }
    }
    Ok(Resolved {
        metadata: Arc::new(Value::Object(meta.clone())),
        entries: Arc::new(entries),
        invoke_hooks: Arc::new(invoke_hooks),
        next_hooks: Arc::new(next_hooks),
        dynamic: merged.dynamic,
    })
}

/// The tool keys left after automatic static.
fn demote_same_component(index: &SearchIndex, tool: &Tool, merged: &Merged) -> Result<Vec<String>> {
    let forced = |key: &str| match merged.metadata.get("$dynamic") {
        Some(Value::Bool(true)) => true,
        Some(Value::Array(items)) => items.iter().any(|i| i.as_str() == Some(key)),
        _ => false,
    };
    let mut scc = index.scc.lock();
    let mut edges = |name: &str| -> Result<Vec<String>> {
        // A broken neighbour contributes no edges; invoking it reports its own error.
        Ok(match self::merged(index, name) {
            Ok(m) => m.tool_keys.clone(),
            Err(_) => Vec::new(),
        })
    };
    let own = scc.component_of(&tool.name, &mut edges)?;
    let mut keys = Vec::with_capacity(merged.tool_keys.len());
    for key in &merged.tool_keys {
        if forced(key) || scc.component_of(key, &mut edges)? != own {
            keys.push(key.clone());
        }
    }
    Ok(keys)
}

fn trigger_list(value: &Value) -> Vec<&str> {
    match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}
