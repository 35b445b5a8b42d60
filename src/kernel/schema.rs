//! JSON Schema validators, compiled once per schema value and cached.
//!
//! Schemas reach the validator inside shared `Arc<Value>`s (a cascade's merged metadata, a
//! tool's declaration) that live as long as a registry generation. The cache is keyed by that
//! holder's address plus the key inside it, and keeps the holder alive, so an address is never
//! reused while its entry exists. A holder replaced on write simply misses; the cache is
//! bounded and starts over when full.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ErrorKind, SkillError};

const CAPACITY: usize = 512;

/// Holder address and key inside it.
type Key = (usize, &'static str);

/// The holder (kept alive so its address stays unique) and the compiled validator.
type Cached = (Arc<Value>, Arc<jsonschema::Validator>);

#[derive(Default)]
pub struct SchemaCache {
    map: Mutex<HashMap<Key, Cached>>,
}

impl SchemaCache {
    /// The validator for `holder[key]`, or `None` if there is no schema there.
    pub fn validator(
        &self,
        holder: &Arc<Value>,
        key: &'static str,
    ) -> Result<Option<Arc<jsonschema::Validator>>, SkillError> {
        let Some(schema) = holder.get(key).filter(|s| !s.is_null()) else {
            return Ok(None);
        };
        let id = (Arc::as_ptr(holder) as usize, key);
        if let Some((_, v)) = self.map.lock().get(&id) {
            return Ok(Some(v.clone()));
        }
        let validator =
            Arc::new(jsonschema::validator_for(schema).map_err(|e| {
                SkillError::config(format!("`{key}` is not a valid JSON Schema: {e}"))
            })?);
        let mut map = self.map.lock();
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(id, (holder.clone(), validator.clone()));
        Ok(Some(validator))
    }
}

/// Validates `instance`; on failure the error lists every failing field path.
pub fn check(
    validator: &jsonschema::Validator,
    instance: &Value,
    kind: ErrorKind,
    what: &str,
) -> Result<(), SkillError> {
    if validator.is_valid(instance) {
        return Ok(());
    }
    let failures: Vec<Value> = validator
        .iter_errors(instance)
        .map(|e| {
            let path = e.instance_path().to_string();
            json!({ "path": if path.is_empty() { "/".to_string() } else { path }, "message": e.to_string() })
        })
        .collect();
    let summary = failures
        .iter()
        .map(|f| {
            format!(
                "{}: {}",
                f["path"].as_str().unwrap_or("/"),
                f["message"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(SkillError::new(kind, format!("{what}: {summary}"))
        .with_data(json!({ "errors": failures })))
}

/// Validates `instance` against the schema under `key` of `target`'s resolved cascade
/// (`run.middleware`), if there is one. A failure is recorded in `target`'s `locals.error` and
/// names the served tool.
pub fn check_cascade(
    target: &crate::context::Context,
    key: &'static str,
    instance: &Value,
    kind: ErrorKind,
    what: &str,
) -> Result<(), SkillError> {
    let holder = target.cascade_shared();
    let Some(validator) = target.kernel().schemas().validator(&holder, key)? else {
        return Ok(());
    };
    let what = format!(
        "{what} of `{}` do not match its {key} schema",
        target.tool_name()
    );
    check(&validator, instance, kind, &what)
        .map_err(|e| target.fail(e.with_tool(target.tool_name())))
}
