//! Hot reload for `skillgate serve`: the skill folders, the project folder (its main skill) and
//! the config file are watched, and re-read after a quiet moment or on SIGHUP. New requests see
//! the new skills while runs in flight finish on the set they started with (each holds its
//! index); an edit that breaks a skill keeps the running set, logs the error with its file and
//! line, and `/readyz` shows it under `reload`.
//!
//! The config file is read again on every reload (mistakes logged with file and line, shown in
//! `/readyz`) and, where the caller gave an [`ApplyConfig`] (`serve`), its settings are put in
//! force: `/readyz` shows the settings' generation and the last reload's error.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use parking_lot::RwLock;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigErrors, ConfigFile};
use crate::context::id::now_ms;
use crate::kernel::Kernel;

/// How long the files must stay quiet before a reload: an editor's save, a `git checkout` or a
/// `cp -r` is many events, and one reload should see all of them.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// Puts a config file's settings in force (what `serve` gives the reloader): `Ok(None)` when
/// they are those in force already, `Ok(Some(names))` once applied, with the settings given
/// new values that only a restart applies, or the mistake that kept them from applying (and
/// left the running ones).
pub type ApplyConfig =
    Arc<dyn Fn(&ConfigFile) -> Result<Option<Vec<String>>, ConfigErrors> + Send + Sync>;

/// What the last reload did, for `/readyz` (a kernel extension while `serve` runs).
pub struct ReloadState {
    last: RwLock<Option<Value>>,
    /// The settings in force: 1 as started, one more each time a reload applies new ones.
    generation: AtomicU64,
}

impl Default for ReloadState {
    fn default() -> Self {
        ReloadState {
            last: RwLock::new(None),
            generation: AtomicU64::new(1),
        }
    }
}

impl ReloadState {
    /// The settings' `generation`, and the last attempt (none before the first): `ok`, what
    /// triggered it, when, the skills that kept it from being applied, whether the config file
    /// reads and applies cleanly, and its `error` (`null` when it had none).
    pub fn to_json(&self) -> Value {
        let mut shown = self
            .last
            .read()
            .clone()
            .unwrap_or_else(|| json!({ "error": null }));
        shown["generation"] = json!(self.generation.load(Ordering::Relaxed));
        shown
    }

    fn record(&self, attempt: Value) {
        *self.last.write() = Some(attempt);
    }
}

/// Re-reads the skills and the config file now (and puts its settings in force with `apply`);
/// `trigger` says why (`watch`, `SIGHUP`). Returns true when the new skills were applied.
pub fn reload(
    kernel: &Kernel,
    (project, config): (&Path, Option<&Path>),
    apply: Option<&ApplyConfig>,
    trigger: &str,
) -> bool {
    let (applied, failures) = match kernel.registry().try_reload() {
        Ok(index) => {
            tracing::info!(
                trigger,
                generation = index.generation,
                skills = index.tools().count(),
                "skills reloaded"
            );
            (true, Vec::new())
        }
        Err(broken) => {
            for failure in &broken {
                // The message names the file, line and column.
                tracing::error!(trigger, skill = %failure.name, "skills not reloaded: {}", failure.error);
            }
            // Only the skills this edit broke: ones broken before did not block it.
            let names: Vec<String> = broken.into_iter().map(|f| f.name).collect();
            (false, names)
        }
    };
    let state = kernel.extension::<ReloadState>();
    let config_error = match ConfigFile::read(project, config) {
        Ok(file) => match apply.map(|apply| apply(&file)) {
            None | Some(Ok(None)) => None,
            Some(Ok(Some(need_restart))) => {
                let generation = state
                    .as_ref()
                    .map_or(0, |s| s.generation.fetch_add(1, Ordering::Relaxed) + 1);
                tracing::info!(trigger, generation, "settings reloaded");
                for setting in need_restart {
                    tracing::warn!(
                        trigger,
                        setting,
                        "`{setting}` changed: it takes effect at the next start (the running value is kept)"
                    );
                }
                None
            }
            Some(Err(errors)) => {
                for error in &errors.0 {
                    tracing::error!(trigger, "settings not reloaded: {error}");
                }
                Some(shown(&errors))
            }
        },
        Err(errors) => {
            for error in &errors.0 {
                tracing::error!(trigger, "config file not valid: {error}");
            }
            Some(shown(&errors))
        }
    };
    if let Some(state) = state {
        let error = match (&config_error, failures.is_empty()) {
            (Some(error), _) => Value::String(error.clone()),
            (None, false) => Value::String(format!(
                "skills not reloaded: {} (see the log for files and lines)",
                failures.join(", ")
            )),
            (None, true) => Value::Null,
        };
        state.record(json!({
            "ok": applied && config_error.is_none(),
            "trigger": trigger,
            "at": now_ms(),
            // Names only: `/readyz` is public; the files and lines are in the log.
            "failures": failures,
            "config": { "ok": config_error.is_none() },
            "error": error,
        }));
    }
    applied
}

/// A config mistake as `/readyz` (public) shows it: the settings' paths; the log has each with
/// its file, line and message.
fn shown(errors: &ConfigErrors) -> String {
    let mut paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    paths.dedup();
    format!(
        "the config file was not applied: mistakes at {} (the log has each with its file and line); the running settings are kept",
        paths.join(", ")
    )
}

/// What a reload applies besides the skills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// `serve`: the declared event routes and schedules follow the skills.
    SkillsRoutesAndSchedules,
    /// `mcp`: the skills alone (the MCP client is told their list changed).
    Skills,
}

/// Watches `project` (its own files), the skill folders and `config`, and reloads on changes
/// (when `watch`) and on SIGHUP, until `stop`.
/// `apply` puts the config file's settings in force on each reload.
pub fn spawn(
    kernel: Kernel,
    (project, config): (PathBuf, Option<PathBuf>),
    (watch, applies): (bool, Applies),
    apply: Option<ApplyConfig>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let watcher = if watch {
        match watch_paths(&kernel, &project, config.as_deref(), tx) {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                tracing::warn!(error = %err, "cannot watch the skill folders; reload with SIGHUP");
                None
            }
        }
    } else {
        None
    };
    // Caught from now on (before the start line is printed): a SIGHUP never ends the process.
    let mut hangup = hangup();
    tokio::spawn(async move {
        // Kept alive for as long as the task runs.
        let _watcher = watcher;
        loop {
            let trigger = tokio::select! {
                () = stop.cancelled() => return,
                Some(()) = rx.recv() => {
                    // Wait for the files to go quiet, then take everything that came meanwhile.
                    while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
                    "watch"
                }
                () = next_hangup(&mut hangup) => "SIGHUP",
            };
            let (project, config) = (project.clone(), config.clone());
            // Loading skills reads files and runs `.skill.js` top levels: off the runtime.
            let applied = {
                let (kernel, apply) = (kernel.clone(), apply.clone());
                tokio::task::spawn_blocking(move || {
                    reload(
                        &kernel,
                        (&project, config.as_deref()),
                        apply.as_ref(),
                        trigger,
                    )
                })
                .await
            };
            if matches!(applied, Ok(true)) && applies == Applies::SkillsRoutesAndSchedules {
                // Routes the edit added get their workers; those it removed lose theirs.
                crate::events::routes::subscribe_declared(&kernel).await;
                crate::schedule::runner::sync_declared(&kernel).await;
            }
        }
    })
}

fn watch_paths(
    kernel: &Kernel,
    project: &Path,
    config: Option<&Path>,
    tx: mpsc::UnboundedSender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && !event.kind.is_access()
            && event.paths.iter().any(|p| relevant(p))
        {
            let _ = tx.send(());
        }
    })?;
    // The project folder itself (main skill, config file), not what lies below it: the
    // runtime folder `.skillgate/` changes all the time.
    watcher.watch(project, RecursiveMode::NonRecursive)?;
    for dir in kernel.registry().config().skill_dirs {
        if dir.is_dir() {
            watcher.watch(&dir, RecursiveMode::Recursive)?;
        }
    }
    if let Some(config) = config
        && config.parent() != Some(project)
        && config.exists()
    {
        watcher.watch(config, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// Skill files, config files and folders; not editors' swap and backup files.
fn relevant(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name.starts_with('.') || name.ends_with('~') || name.ends_with(".swp") {
        return false;
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some("md" | "js" | "yaml" | "yml" | "json") => true,
        // A folder added, renamed or removed (a skill folder with its SKILL.md).
        None => true,
        Some(_) => false,
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

fn hangup() -> Hangup {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
    }
}

async fn next_hangup(hangup: &mut Hangup) {
    #[cfg(unix)]
    if let Some(signal) = hangup {
        signal.recv().await;
        return;
    }
    let _ = hangup;
    std::future::pending::<()>().await
}
