//! A search index: the tools visible through one list of search paths, first one shadowing later.
//!
//! An index is immutable once built and belongs to one registry generation, so the caches it
//! carries (merged cascades, resolved chains, SCC membership) are invalidated by building a new
//! index, never by editing this one.

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::cascade::{Merged, Resolved, SccState};
use crate::error::{ErrorKind, Result, SkillError};
use crate::skills::tool::{Source, Tool};

/// One tool in an index, with the caches computed from it on first use.
pub struct Slot {
    pub tool: Arc<Tool>,
    /// Locations of tools of the same name that this one shadows.
    pub shadows: Vec<String>,
    pub(crate) merged: OnceLock<Result<Arc<Merged>>>,
    pub(crate) resolved: OnceLock<Result<Arc<Resolved>>>,
}

/// A file that failed to load; invoking its name reports this error.
#[derive(Debug, Clone)]
pub struct LoadFailure {
    pub name: String,
    pub error: SkillError,
}

/// Tools added to an index after its folders, bundled and native tools.
pub type Layered = Arc<[Arc<Tool>]>;

/// The tools visible through one list of search paths.
pub struct SearchIndex {
    pub generation: u64,
    /// Skill folders on disk, in search order (bundled and native tools come after them).
    pub dirs: Vec<PathBuf>,
    /// Tools layered after everything else (those of mounted MCP servers): a tool of the same
    /// name from a folder, bundled or native shadows one of these.
    pub layered: Layered,
    slots: FxHashMap<String, Slot>,
    /// Names in listing order.
    order: Vec<String>,
    failures: Vec<LoadFailure>,
    /// Folder -> name of the main skill (`role: main`) that governs it.
    authorities: HashMap<PathBuf, String>,
    /// Skills whose public metadata is a level of every skill's cascade (`$global: true`), in
    /// listing order.
    globals: Vec<String>,
    /// Metadata given on the command line: the top level of every cascade.
    pub overrides: Arc<Map<String, Value>>,
    pub(crate) scc: Mutex<SccState>,
    /// The agent providers some metadata selects (`model.agent`): pipeline machinery, named by
    /// the project only.
    providers: std::collections::HashSet<String>,
}

impl SearchIndex {
    /// The main skill of the project in `project`: the one with `role: main` in the project
    /// folder itself, whose cascade declares the doors' routes (web, webhook, Slack).
    pub fn main_skill(&self, project: &Path) -> Option<&Arc<Tool>> {
        let project = std::path::absolute(project).ok();
        self.tools().find(|t| {
            t.is_main && matches!(&t.source, Source::File(p) if p.parent() == project.as_deref())
        })
    }

    /// Builds an index from tools already in search order: the first tool of a name wins.
    pub fn build(
        generation: u64,
        dirs: Vec<PathBuf>,
        layered: Layered,
        tools: Vec<Arc<Tool>>,
        failures: Vec<LoadFailure>,
        overrides: Arc<Map<String, Value>>,
    ) -> SearchIndex {
        let mut slots: FxHashMap<String, Slot> = FxHashMap::default();
        let mut order = Vec::with_capacity(tools.len());
        let mut authorities = HashMap::new();
        for tool in tools {
            if let Some(slot) = slots.get_mut(&tool.name) {
                slot.shadows.push(tool.location());
                continue;
            }
            if tool.is_main
                && let Some(dir) = tool.dir()
            {
                authorities.entry(dir).or_insert_with(|| tool.name.clone());
            }
            order.push(tool.name.clone());
            slots.insert(
                tool.name.clone(),
                Slot {
                    tool,
                    shadows: Vec::new(),
                    merged: OnceLock::new(),
                    resolved: OnceLock::new(),
                },
            );
        }
        // A failure only matters if no good tool of that name is visible.
        let globals = order
            .iter()
            .filter(|n| slots[*n].tool.metadata.get("$global") == Some(&Value::Bool(true)))
            .cloned()
            .collect();
        let failures = failures
            .into_iter()
            .filter(|f| !slots.contains_key(&f.name))
            .collect();
        let providers = slots
            .values()
            .map(|s| &*s.tool.metadata)
            .chain(std::iter::once(&*overrides))
            .filter_map(|m| m.get("model")?.get("agent")?.as_str().map(str::to_string))
            .collect();
        SearchIndex {
            generation,
            dirs,
            layered,
            slots,
            order,
            failures,
            authorities,
            globals,
            overrides,
            scc: Mutex::new(SccState::default()),
            providers,
        }
    }

    /// True when some metadata selects `name` as its agent provider (`model.agent`).
    pub fn is_provider(&self, name: &str) -> bool {
        self.providers.contains(name)
    }

    pub fn slot(&self, name: &str) -> Option<&Slot> {
        self.slots.get(name)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.slots.get(name).map(|s| &s.tool)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }

    /// All visible tools in listing order.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.order.iter().filter_map(|n| self.get(n))
    }

    pub fn failures(&self) -> &[LoadFailure] {
        &self.failures
    }

    /// Finds a tool, or says why not: the file's load error, or the closest names.
    pub fn find(&self, name: &str) -> Result<&Arc<Tool>> {
        self.find_slot(name).map(|slot| &slot.tool)
    }

    /// Like `find`, returning the slot with its caches.
    pub fn find_slot(&self, name: &str) -> Result<&Slot> {
        if let Some(slot) = self.slots.get(name) {
            return Ok(slot);
        }
        if let Some(failure) = self.failures.iter().find(|f| f.name == name) {
            return Err(failure.error.clone());
        }
        let suggestions = self.closest(name);
        let mut message = format!("no skill named `{name}`");
        if !suggestions.is_empty() {
            message.push_str(&format!("; did you mean {}?", quote_list(&suggestions)));
        }
        Err(SkillError::new(ErrorKind::NotFound, message)
            .with_data(serde_json::json!({ "name": name, "suggestions": suggestions })))
    }

    /// Up to three visible names closest to `name`.
    pub fn closest(&self, name: &str) -> Vec<String> {
        let mut scored: Vec<(f64, &String)> = self
            .order
            .iter()
            .map(|candidate| (strsim::jaro_winkler(name, candidate), candidate))
            .filter(|(score, candidate)| {
                *score >= 0.75
                    || strsim::levenshtein(name, candidate) <= 2
                    || candidate.contains(name)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(3).map(|(_, n)| n.clone()).collect()
    }

    /// The skills whose public metadata applies to `tool` beneath its authorities: every
    /// `$global: true` skill, for skills from files (native tools, the pipeline's own machinery,
    /// and the tools of MCP servers take none), unless `tool` says `$global: false`.
    pub fn globals_for(&self, tool: &Tool) -> impl Iterator<Item = &Arc<Tool>> {
        let applies = !matches!(tool.source, Source::Native | Source::Mcp(_))
            && tool.metadata.get("$global") != Some(&Value::Bool(false));
        let names: &[String] = if applies { &self.globals } else { &[] };
        names
            .iter()
            .filter(move |n| **n != tool.name)
            .filter_map(|n| self.get(n))
    }

    /// The main skill governing `tool`: its `$authority`, else the nearest `role: main` skill in
    /// the folder of the tool's file or a folder above it.
    pub fn authority_of(&self, tool: &Tool) -> Option<&Arc<Tool>> {
        match tool.metadata.get("$authority") {
            Some(Value::String(name)) => return self.get(name).filter(|a| a.name != tool.name),
            Some(Value::Bool(false)) => return None,
            _ => {}
        }
        let Source::File(path) = &tool.source else {
            return None;
        };
        let mut dir: Option<&Path> = path.parent();
        while let Some(d) = dir {
            if let Some(name) = self.authorities.get(d)
                && name != &tool.name
            {
                return self.get(name);
            }
            dir = d.parent();
        }
        None
    }
}

fn quote_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
