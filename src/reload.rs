//! Hot reload for `skillgate serve`: the skill folders, the project folder (its main skill) and
//! the config file are watched, and re-read after a quiet moment or on SIGHUP. New requests see
//! the new skills while runs in flight finish on the set they started with (each holds its
//! index); an edit that breaks a skill keeps the running set, logs the error with its file and
//! line, and `/readyz` shows it under `reload`.
//!
//! The config file is checked on every change (mistakes logged with file and line, shown in
//! `/readyz`); its settings take effect at the next start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use parking_lot::RwLock;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::id::now_ms;
use crate::kernel::Kernel;

/// How long the files must stay quiet before a reload: an editor's save, a `git checkout` or a
/// `cp -r` is many events, and one reload should see all of them.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// What the last reload did, for `/readyz` (a kernel extension while `serve` runs).
#[derive(Default)]
pub struct ReloadState {
    last: RwLock<Option<Value>>,
}

impl ReloadState {
    /// The last attempt (`null` before the first): `ok`, what triggered it, when, the skills
    /// that kept it from being applied, and whether the config file reads cleanly.
    pub fn to_json(&self) -> Value {
        self.last.read().clone().unwrap_or(Value::Null)
    }

    fn record(&self, attempt: Value) {
        *self.last.write() = Some(attempt);
    }
}

/// Re-reads the skills (and checks the config file) now; `trigger` says why (`watch`, `SIGHUP`).
/// Returns true when the new skills were applied.
pub fn reload(kernel: &Kernel, project: &Path, config: Option<&Path>, trigger: &str) -> bool {
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
    let config_ok = match crate::config::ConfigFile::read(project, config) {
        Ok(_) => true,
        Err(errors) => {
            for error in &errors.0 {
                tracing::error!(trigger, "config file not valid: {error}");
            }
            false
        }
    };
    if let Some(state) = kernel.extension::<ReloadState>() {
        state.record(json!({
            "ok": applied,
            "trigger": trigger,
            "at": now_ms(),
            // Names only: `/readyz` is public; the files and lines are in the log.
            "failures": failures,
            "config": { "ok": config_ok },
        }));
    }
    applied
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
pub fn spawn(
    kernel: Kernel,
    (project, config): (PathBuf, Option<PathBuf>),
    watch: bool,
    applies: Applies,
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
                let kernel = kernel.clone();
                tokio::task::spawn_blocking(move || {
                    reload(&kernel, &project, config.as_deref(), trigger)
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
