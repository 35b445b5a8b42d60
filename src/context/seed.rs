//! What the kernel reads and writes on a context while it sets an invocation up: the caller's
//! invoke policy, the nonlocals a child inherits, the seed merged into a fresh context, and the
//! first error of a run.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::context::Context;
use crate::error::SkillError;
use crate::skills::index::SearchIndex;
use crate::skills::patterns::AllowedTools;

/// What `invoke` from a context may reach: whether its refs are untrusted, its `allowed-tools`
/// policy, and where it looks tools up.
pub(crate) struct InvokePolicy {
    pub(crate) untrusted: bool,
    pub(crate) allowed: Option<Arc<AllowedTools>>,
    pub(crate) index: Arc<SearchIndex>,
}

impl Context {
    pub(crate) fn invoke_policy(&self) -> InvokePolicy {
        let state = self.0.state.lock();
        InvokePolicy {
            untrusted: state.locals.untrusted_ref,
            allowed: state.locals.allowed_tools.clone(),
            index: state.index.clone(),
        }
    }

    /// `nonlocals`, shared (copied on write) for a child to inherit.
    pub(crate) fn nonlocals_shared(&self) -> Arc<Map<String, Value>> {
        self.0.state.lock().nonlocals.clone()
    }

    /// `run.middleware`, shared: the resolved cascade schemas are looked up by it.
    pub(crate) fn cascade_shared(&self) -> Arc<Value> {
        self.0.state.lock().run.middleware.clone()
    }

    /// Merges seeded nonlocals; `rootContextId` is the kernel's to set (logs, events and streams
    /// are routed by it), so a seed never replaces it.
    pub(crate) fn merge_nonlocals(&self, nonlocals: Map<String, Value>) {
        if nonlocals.is_empty() {
            return;
        }
        let mut state = self.0.state.lock();
        let map = Arc::make_mut(&mut state.nonlocals);
        for (k, v) in nonlocals {
            if k != "rootContextId" {
                map.insert(k, v);
            }
        }
    }

    /// Adds seeded keys to `locals.config`.
    pub(crate) fn extend_config(&self, fields: Map<String, Value>) {
        let mut state = self.0.state.lock();
        if let Value::Object(config) = Arc::make_mut(&mut state.locals.config) {
            config.extend(fields);
        }
    }

    /// Records `locals.error` unless an earlier error is already there.
    pub(crate) fn record_first_error(&self, err: &SkillError) {
        let mut state = self.0.state.lock();
        if state.locals.error.is_none() {
            state.locals.error = Some(err.clone());
        }
    }

    /// The extra middleware a chain takes (`locals.middleware` from the seed, and the cascading
    /// `nonlocals.middleware` unless this context serves another) and whether
    /// `nonlocals.debug = false` silences hooks.
    pub(crate) fn chain_adjustments(&self) -> (Option<Value>, Option<Value>, bool) {
        let state = self.0.state.lock();
        (
            state
                .locals
                .other
                .as_ref()
                .and_then(|other| other.get("middleware"))
                .cloned(),
            // Cascading middleware is for the invocations below, not for the middleware that
            // serves them (chain entries and hooks): appended there it would sit inside
            // `execute`'s own pipeline, where the cycle check skips it and no body runs.
            small_get(&state.nonlocals, "middleware")
                .filter(|_| !self.has_other_target())
                .cloned(),
            small_get(&state.nonlocals, "debug") == Some(&Value::Bool(false)),
        )
    }
}

/// `map[key]`, found in a map of a few keys by comparing them rather than hashing `key`: this
/// is asked of every new context's `nonlocals` (a gateway run's has three or four keys), and
/// hashing a key costs more than comparing a few.
fn small_get<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() > 8 {
        return map.get(key);
    }
    map.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}
