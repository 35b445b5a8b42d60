//! The directive tools that name and read files: `:path` and `:inline`.
//!
//! Relative paths are taken from the served skill's folder (`from=cwd` or `from=workspace` take
//! them from `locals.config`). `:inline` (and `:script`, see `directive_code`) read only inside
//! the skill's project: a path that leaves it, through `..` or a symlink, is refused.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::context::Context;
use crate::error::{Result, SkillError};
use crate::middleware::directive_tools::{attr, directive, frontmatter};
use crate::skills::native::native;
use crate::skills::tool::Tool;

/// The largest file `:inline` and `:script` read (a prompt is not a place for more).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

pub fn tools() -> Vec<Tool> {
    vec![
        native(
            &frontmatter(
                "path",
                "Inserts an absolute path: :path[data/x.csv]{from=skill|cwd|workspace}",
            ),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    let path = resolve(&target, &label, &args)?;
                    Ok(Some(Value::String(path.display().to_string())))
                })
            },
        ),
        native(
            &frontmatter(
                "inline",
                "Inserts a file's text as it is: :inline[notes/style.md]",
            ),
            |ctx, args| {
                directive(ctx, args, |target, label, args| async move {
                    Ok(Some(Value::String(read(&target, &label, &args).await?)))
                })
            },
        ),
    ]
}

/// `label` as an absolute, lexically normalised path, from the base `from` names.
pub(crate) fn resolve(target: &Context, label: &str, args: &Value) -> Result<PathBuf> {
    if label.trim().is_empty() {
        return Err(SkillError::config("the label must be a path"));
    }
    let path = Path::new(label);
    if path.is_absolute() {
        return Ok(normalise(path));
    }
    let from = attr(args, "from");
    let base = match from.as_ref().and_then(Value::as_str).unwrap_or("skill") {
        "skill" => target.tool().dir().ok_or_else(|| {
            SkillError::config(format!(
                "`{}` is not a file on disk, so it has no folder to take a relative path from (use from=cwd)",
                target.tool_name()
            ))
        })?,
        key @ ("cwd" | "workspace") => target
            .get(&format!("locals.config.{key}"))?
            .and_then(|v| v.as_str().map(PathBuf::from))
            .ok_or_else(|| SkillError::config(format!("locals.config.{key} is not set")))?,
        other => {
            return Err(SkillError::config(format!(
                "`from` must be `skill`, `cwd` or `workspace`, got `{other}`"
            )));
        }
    };
    let base = std::path::absolute(&base)
        .map_err(|e| SkillError::config(format!("cannot resolve `{}`: {e}", base.display())))?;
    Ok(normalise(&base.join(path)))
}

/// The text of the file `label` names, once checked: an existing file inside the skill's
/// project (or its own folder), no larger than [`MAX_FILE_BYTES`].
pub(crate) async fn read(target: &Context, label: &str, args: &Value) -> Result<String> {
    let path = readable(target, label, args)?;
    tokio::fs::read_to_string(&path)
        .await
        .map_err(|e| cannot_read(&path, &e))
}

fn cannot_read(path: &Path, error: &std::io::Error) -> SkillError {
    SkillError::config(format!("cannot read `{}`: {error}", path.display()))
}

/// `label` resolved and checked for reading (see [`read`]).
fn readable(target: &Context, label: &str, args: &Value) -> Result<PathBuf> {
    let path = resolve(target, label, args)?;
    let real = path.canonicalize().map_err(|e| cannot_read(&path, &e))?;
    let roots = roots(target);
    if !roots.iter().any(|root| real.starts_with(root)) {
        return Err(SkillError::config(format!(
            "`{}` is outside the skill's project; files are read only from {}",
            path.display(),
            roots
                .iter()
                .map(|r| format!("`{}`", r.display()))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let meta = std::fs::metadata(&real).map_err(|e| cannot_read(&path, &e))?;
    if !meta.is_file() {
        return Err(SkillError::config(format!(
            "`{}` is not a file",
            path.display()
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(SkillError::config(format!(
            "`{}` is {} bytes; directives read files of at most {MAX_FILE_BYTES} bytes",
            path.display(),
            meta.len()
        )));
    }
    Ok(real)
}

/// Where directives may read: the project of every skill folder searched, and the served
/// skill's own folder.
fn roots(target: &Context) -> Vec<PathBuf> {
    let index = target.index();
    let mut out: Vec<PathBuf> = index
        .dirs
        .iter()
        .map(|d| match d.parent() {
            Some(p) if p.as_os_str().is_empty() => PathBuf::from("."),
            Some(p) => p.to_path_buf(),
            None => d.clone(),
        })
        .chain(target.tool().dir())
        .filter_map(|d| d.canonicalize().ok())
        .collect();
    out.dedup();
    out
}

/// Removes `.` and folds `..` without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
