//! The registry: where skills are searched for, the native tools, and the current generation.
//!
//! Search order: the project's main skill, the skill folders (the user's `./skills` first), the
//! skills bundled into the binary, then native tools. An earlier tool shadows a later one of the
//! same name. `reload` builds a new generation; indexes (and so every cache) of the old one are
//! simply dropped when the last context using them ends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLock};
use serde_json::{Map, Value};

use crate::skills::index::{Layered, LoadFailure, SearchIndex};
use crate::skills::loader::{self, Loaded, ScriptParser};
use crate::skills::tool::Tool;

/// Where the registry looks for skills.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// The project folder: its `main.skill.md` is the authority of the project's skills.
    pub project_dir: PathBuf,
    /// Skill folders in search order (default: `<project>/skills`).
    pub skill_dirs: Vec<PathBuf>,
    /// Metadata overrides from the command line (top cascade level).
    pub overrides: Map<String, Value>,
    /// Reads `.skill.js` files (the sandbox's parser, installed by `crate::builtins`).
    pub scripts: Option<ScriptParser>,
}

impl RegistryConfig {
    pub fn for_project(project_dir: impl Into<PathBuf>) -> RegistryConfig {
        let project_dir = project_dir.into();
        RegistryConfig {
            skill_dirs: vec![project_dir.join("skills")],
            project_dir,
            overrides: Map::new(),
            scripts: None,
        }
    }
}

pub struct Registry {
    config: RwLock<RegistryConfig>,
    natives: RwLock<Vec<Arc<Tool>>>,
    generation: AtomicU64,
    /// Read on every invocation by every core: swapped whole, read without a lock.
    current: ArcSwap<SearchIndex>,
    /// Indexes for search paths set by the `paths` middleware and tools layered by the `mcp`
    /// middleware, per generation.
    custom: Mutex<HashMap<CustomKey, Arc<SearchIndex>>>,
    /// The generation installed last, for those who wait for the next one.
    installed: tokio::sync::watch::Sender<u64>,
}

/// How many indexes other than the current one are kept per generation.
const MAX_CUSTOM: usize = 256;

/// An index other than the current one: its folders, and its layered tools by identity (a
/// mounted server's tools are one shared list until it reconnects and lists them again).
type CustomKey = (Vec<PathBuf>, Vec<usize>);

impl Registry {
    pub fn new(config: RegistryConfig, natives: Vec<Arc<Tool>>) -> Registry {
        let index = build(0, &config, &config.skill_dirs, &natives);
        Registry {
            config: RwLock::new(config),
            natives: RwLock::new(natives),
            generation: AtomicU64::new(0),
            current: ArcSwap::from_pointee(index),
            custom: Mutex::new(HashMap::new()),
            installed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Sees each new generation as it is installed (a reload), without polling.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.installed.subscribe()
    }

    /// The index of the current generation over the default search paths.
    pub fn current(&self) -> Arc<SearchIndex> {
        self.current.load_full()
    }

    /// The index over `dirs` (then the bundled and native tools), built once per generation.
    pub fn with_dirs(&self, dirs: &[PathBuf]) -> Arc<SearchIndex> {
        self.layered(dirs, &no_layer())
    }

    /// The index over `dirs`, then the bundled and native tools, then `layered` (which any of
    /// those shadow), built once per generation.
    pub fn layered(&self, dirs: &[PathBuf], layered: &Layered) -> Arc<SearchIndex> {
        let current = self.current();
        if layered.is_empty() {
            return self.over_dirs(&current, dirs);
        }
        let key: CustomKey = (
            dirs.to_vec(),
            layered.iter().map(|t| Arc::as_ptr(t) as usize).collect(),
        );
        if let Some(index) = self.cached(&key, current.generation) {
            return index;
        }
        // Built from the index over `dirs`: the folders are read once, not per layering.
        let base = self.over_dirs(&current, dirs);
        let tools: Vec<Arc<Tool>> = base.tools().chain(layered.iter()).cloned().collect();
        let index = Arc::new(SearchIndex::build(
            base.generation,
            dirs.to_vec(),
            layered.clone(),
            tools,
            base.failures().to_vec(),
            base.overrides.clone(),
        ));
        for tool in layered.iter() {
            if let Some(winner) = index.get(&tool.name).filter(|w| !Arc::ptr_eq(w, tool)) {
                tracing::warn!(
                    tool = %tool.name,
                    "`{}` is shadowed by `{}`: the skill of that name is invoked instead",
                    tool.location(),
                    winner.location()
                );
            }
        }
        self.keep(key, index.clone());
        index
    }

    /// The index over `dirs` (then the bundled and native tools) in `current`'s generation.
    fn over_dirs(&self, current: &Arc<SearchIndex>, dirs: &[PathBuf]) -> Arc<SearchIndex> {
        if current.dirs == dirs {
            return current.clone();
        }
        let key: CustomKey = (dirs.to_vec(), Vec::new());
        if let Some(index) = self.cached(&key, current.generation) {
            return index;
        }
        let config = self.config.read().clone();
        let index = Arc::new(build(
            current.generation,
            &config,
            dirs,
            &self.natives.read(),
        ));
        self.keep(key, index.clone());
        index
    }

    fn cached(&self, key: &CustomKey, generation: u64) -> Option<Arc<SearchIndex>> {
        self.custom
            .lock()
            .get(key)
            .filter(|index| index.generation == generation)
            .cloned()
    }

    /// Keeps an index for reuse; past [`MAX_CUSTOM`] the kept ones start over.
    fn keep(&self, key: CustomKey, index: Arc<SearchIndex>) {
        let mut custom = self.custom.lock();
        if custom.len() >= MAX_CUSTOM {
            custom.clear();
        }
        custom.insert(key, index);
    }

    /// Re-reads every skill folder and starts a new generation; caches of the old one go away.
    pub fn reload(&self) -> Arc<SearchIndex> {
        let index = self.build_next();
        self.install(index.clone());
        index
    }

    /// The index of a new generation over the default search paths, not installed yet.
    fn build_next(&self) -> Arc<SearchIndex> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let config = self.config.read().clone();
        Arc::new(build(
            generation,
            &config,
            &config.skill_dirs,
            &self.natives.read(),
        ))
    }

    /// Makes `index` the current one; the custom-path indexes of the old generation go away.
    fn install(&self, index: Arc<SearchIndex>) {
        let generation = index.generation;
        self.current.store(index);
        self.custom.lock().clear();
        self.installed.send_replace(generation);
    }

    /// Re-reads every skill folder like [`Registry::reload`], but keeps the current set when the
    /// new one has a load failure the current one does not (a broken edit): then the error holds
    /// the failures that broke it, only those. Skills that were already broken do not block a
    /// reload.
    pub fn try_reload(&self) -> Result<Arc<SearchIndex>, Vec<LoadFailure>> {
        let current = self.current();
        let candidate = self.build_next();
        let known = |name: &str, message: &str| {
            current
                .failures()
                .iter()
                .any(|f| f.name == name && f.error.message() == message)
        };
        let broken: Vec<LoadFailure> = candidate
            .failures()
            .iter()
            .filter(|f| !known(&f.name, f.error.message()))
            .cloned()
            .collect();
        if !broken.is_empty() {
            return Err(broken);
        }
        self.install(candidate.clone());
        Ok(candidate)
    }

    /// Adds (or replaces) a native tool and starts a new generation.
    pub fn register(&self, tool: Tool) -> Arc<SearchIndex> {
        {
            let mut natives = self.natives.write();
            natives.retain(|t| t.name != tool.name);
            natives.insert(0, Arc::new(tool));
        }
        self.reload()
    }

    /// Replaces the command-line metadata overrides and starts a new generation.
    pub fn set_overrides(&self, overrides: Map<String, Value>) -> Arc<SearchIndex> {
        self.config.write().overrides = overrides;
        self.reload()
    }

    pub fn config(&self) -> RegistryConfig {
        self.config.read().clone()
    }
}

fn build(
    generation: u64,
    config: &RegistryConfig,
    dirs: &[PathBuf],
    natives: &[Arc<Tool>],
) -> SearchIndex {
    let mut all = Loaded::default();
    let mut append = |loaded: Loaded| {
        all.tools.extend(loaded.tools);
        all.failures.extend(loaded.failures);
    };
    append(loader::load_project_main(
        &config.project_dir,
        config.scripts,
    ));
    for dir in dirs {
        append(loader::load_dir(dir, config.scripts));
    }
    append(loader::load_bundled(config.scripts));
    append(Loaded {
        tools: natives.to_vec(),
        failures: Vec::new(),
    });
    SearchIndex::build(
        generation,
        dirs.to_vec(),
        no_layer(),
        all.tools,
        all.failures,
        Arc::new(config.overrides.clone()),
    )
}

fn no_layer() -> Layered {
    Arc::from([])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_is_seen_by_those_waiting_for_changes() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(RegistryConfig::for_project(dir.path()), Vec::new());
        let mut changes = registry.changes();
        assert!(!changes.has_changed().unwrap(), "nothing installed yet");
        let index = registry.reload();
        assert!(changes.has_changed().unwrap());
        assert_eq!(*changes.borrow_and_update(), index.generation);
        assert_eq!(index.generation, 1);
    }
}
