//! Callback refs: tools that live only as long as a handle, invokable by name like any skill,
//! so that code on the other side of a serializable interface (an agent provider) can call back
//! into the caller that made them.
//!
//! A callback's name is `callback-` and 32 random hex digits: unguessable, and a bare tool name.
//! Untrusted code may not invoke one even if it learns the name (see `Context::invoke`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::cascade::{self, Resolved};
use crate::error::Result;
use crate::skills::index::SearchIndex;
use crate::skills::tool::Tool;

/// The prefix every callback ref's name starts with.
pub const PREFIX: &str = "callback-";

/// The callbacks alive in a kernel.
#[derive(Default)]
pub(crate) struct Callbacks {
    live: RwLock<HashMap<Arc<str>, Arc<Entry>>>,
}

struct Entry {
    tool: Arc<Tool>,
    /// The pipeline last resolved for it, and over which index: a callback is invoked many
    /// times (an agent's hook, every event of a run) from the same index.
    resolved: Mutex<Option<(Arc<SearchIndex>, Arc<Resolved>)>>,
}

impl Callbacks {
    /// The callback `name` and its pipeline over `index`, if it is alive.
    pub(crate) fn get(
        &self,
        name: &str,
        index: &Arc<SearchIndex>,
    ) -> Option<Result<(Arc<Tool>, Arc<Resolved>)>> {
        let entry = self.live.read().get(name).cloned()?;
        let mut cached = entry.resolved.lock();
        if let Some((seen, resolved)) = cached.as_ref()
            && Arc::ptr_eq(seen, index)
        {
            return Some(Ok((entry.tool.clone(), resolved.clone())));
        }
        let resolved = match cascade::resolved_for(index, &entry.tool) {
            Ok(resolved) => resolved,
            Err(err) => return Some(Err(err)),
        };
        *cached = Some((index.clone(), resolved.clone()));
        Some(Ok((entry.tool.clone(), resolved)))
    }

    pub(crate) fn insert(self: &Arc<Self>, make: impl FnOnce(&str) -> Tool) -> CallbackRef {
        let name: Arc<str> = Arc::from(fresh_name());
        let tool = make(&name);
        assert_eq!(
            tool.name, *name,
            "a callback tool must take the name it is given"
        );
        let entry = Entry {
            tool: Arc::new(tool),
            resolved: Mutex::new(None),
        };
        self.live.write().insert(name.clone(), Arc::new(entry));
        CallbackRef {
            name,
            owner: Arc::downgrade(self),
        }
    }
}

/// A registered callback; dropping it unregisters the tool.
pub struct CallbackRef {
    name: Arc<str>,
    owner: Weak<Callbacks>,
}

impl CallbackRef {
    /// The name to invoke it by.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for CallbackRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for CallbackRef {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.upgrade() {
            owner.live.write().remove(&self.name);
        }
    }
}

/// True for a name of the callback form.
pub fn is_callback(name: &str) -> bool {
    name.starts_with(PREFIX)
}

fn fresh_name() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the system's random source failed");
    format!("{PREFIX}{}", crate::digest::hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_names_are_bare_tool_names_and_differ() {
        let a = fresh_name();
        let b = fresh_name();
        assert_ne!(a, b);
        assert!(crate::skills::frontmatter::is_tool_name(&a), "{a}");
        assert!(is_callback(&a));
        assert_eq!(a.len(), PREFIX.len() + 32);
    }
}
