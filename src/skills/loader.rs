//! Reads skill files from a folder on disk or from the bundle compiled into the binary.
//!
//! `*.skill.md` and `*.skill.js` files and folder skills (`name/SKILL.md`, `name/SKILL.js`)
//! become tools; a file that fails to parse becomes a `LoadFailure` under the name it would have
//! had, so invoking it reports why.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use include_dir::{Dir, include_dir};

use crate::error::SkillError;
use crate::skills::frontmatter;
use crate::skills::index::LoadFailure;
use crate::skills::tool::{Body, Source, Tool};

/// The repository's `skills/` folder, compiled in.
static BUNDLED: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/skills");

/// What one source yielded.
#[derive(Default)]
pub struct Loaded {
    pub tools: Vec<Arc<Tool>>,
    pub failures: Vec<LoadFailure>,
}

/// The name a skill file gets when its frontmatter has none, or `None` if it is not a skill file.
pub fn default_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    if let Some(stem) = file
        .strip_suffix(".skill.md")
        .or_else(|| file.strip_suffix(".skill.js"))
    {
        return Some(stem.to_string());
    }
    if file == "SKILL.md" || file == "SKILL.js" {
        return path
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .map(str::to_string);
    }
    None
}

/// Parses a script skill file (`.skill.js`): `(source, display, text, default name)`. The
/// skills layer reads markdown itself; script files are read by the engine that runs them,
/// which the composition root (`crate::builtins`) installs in the [`RegistryConfig`].
///
/// [`RegistryConfig`]: crate::skills::registry::RegistryConfig
pub type ScriptParser = fn(Source, &str, &str, &str) -> Result<Tool, SkillError>;

/// Parses one skill from its text: markdown, or a script when `display` ends in `.js` (with
/// `scripts`; without it a script file is an error naming the file).
pub fn parse_skill(
    source: Source,
    display: &str,
    text: &str,
    default: &str,
    scripts: Option<ScriptParser>,
) -> Result<Tool, SkillError> {
    if display.ends_with(".js") {
        return match scripts {
            Some(parse) => parse(source, display, text, default),
            None => Err(SkillError::config(format!(
                "{display}: no script engine is installed to read JavaScript skills"
            ))),
        };
    }
    let parsed = frontmatter::parse_markdown(display, text, default)?;
    Ok(Tool::new(
        parsed.frontmatter,
        source,
        Some(parsed.body),
        Body::Template,
    )
    .prompt_at(parsed.body_line))
}

/// Loads a single skill file from disk.
pub fn load_file(path: &Path, scripts: Option<ScriptParser>) -> Result<Tool, SkillError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| SkillError::config(format!("{display}: cannot read: {e}")))?;
    let default = default_name(path).unwrap_or_else(|| {
        path.file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("skill")
            .trim_end_matches(".skill")
            .to_string()
    });
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    parse_skill(Source::File(absolute), &display, &text, &default, scripts)
}

/// Loads every skill below `root`, in a stable (sorted) order.
pub fn load_dir(root: &Path, scripts: Option<ScriptParser>) -> Loaded {
    let mut files = Vec::new();
    collect(root, &mut files);
    files.sort();
    let mut loaded = Loaded::default();
    for path in files {
        push(
            &mut loaded,
            default_name(&path).unwrap_or_default(),
            load_file(&path, scripts),
        );
    }
    loaded
}

/// The project's main skill (`main.skill.md`, or `SKILL.md` with `role: main`) in `project`.
pub fn load_project_main(project: &Path, scripts: Option<ScriptParser>) -> Loaded {
    let mut loaded = Loaded::default();
    for file in ["main.skill.md", "SKILL.md"] {
        let path = project.join(file);
        if path.is_file() {
            match load_file(&path, scripts) {
                Ok(tool) if tool.is_main => loaded.tools.push(Arc::new(tool)),
                Ok(_) => {}
                Err(error) => loaded.failures.push(LoadFailure {
                    name: "main".into(),
                    error,
                }),
            }
            break;
        }
    }
    loaded
}

fn push(loaded: &mut Loaded, name: String, result: Result<Tool, SkillError>) {
    match result {
        Ok(tool) => loaded.tools.push(Arc::new(tool)),
        Err(error) => loaded.failures.push(LoadFailure { name, error }),
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            collect(&path, out);
        } else if default_name(&path).is_some() {
            out.push(path);
        }
    }
}

/// Loads the skills bundled into the binary.
pub fn load_bundled(scripts: Option<ScriptParser>) -> Loaded {
    let mut files = Vec::new();
    collect_bundled(&BUNDLED, &mut files);
    files.sort_by(|a, b| a.path().cmp(b.path()));
    let mut loaded = Loaded::default();
    for file in files {
        let path = file.path();
        let display = format!("bundled:skills/{}", path.display());
        let default = default_name(path).unwrap_or_default();
        let result = match file.contents_utf8() {
            Some(text) => parse_skill(
                Source::Bundled(path.display().to_string()),
                &display,
                text,
                &default,
                scripts,
            ),
            None => Err(SkillError::config(format!("{display}: not UTF-8"))),
        };
        push(&mut loaded, default, result);
    }
    loaded
}

fn collect_bundled<'a>(dir: &'a Dir<'a>, out: &mut Vec<&'a include_dir::File<'a>>) {
    for file in dir.files() {
        if default_name(file.path()).is_some() {
            out.push(file);
        }
    }
    for sub in dir.dirs() {
        collect_bundled(sub, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_skills_include_the_default_pipeline_and_hello() {
        let loaded = load_bundled(None);
        assert!(loaded.failures.is_empty(), "{:?}", loaded.failures);
        let names: Vec<&str> = loaded.tools.iter().map(|t| t.name.as_str()).collect();
        assert!(names.contains(&"default-pipeline"), "{names:?}");
        assert!(names.contains(&"hello"), "{names:?}");
    }

    #[test]
    fn folder_skills_take_the_folder_name() {
        let named = [
            ("a/report/SKILL.md", Some("report")),
            ("a/x.skill.md", Some("x")),
            ("a/readme.md", None),
            ("a/report/SKILL.js", Some("report")),
            ("a/x.skill.js", Some("x")),
            ("a/helper.js", None),
        ];
        for (path, name) in named {
            assert_eq!(default_name(Path::new(path)).as_deref(), name, "{path}");
        }
    }
}
