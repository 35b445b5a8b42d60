//! `skillgate init [dir]`: writes a new project (a main skill, a markdown and a JavaScript example,
//! `skillgate.yaml` with every transport commented out, a `.gitignore` for the runtime folder)
//! that `skillgate run` and `skillgate serve` work in at once.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::exit::{FAILED, USAGE};

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The folder of the new project (created if missing) [default: `--project`, else the
    /// current folder].
    pub dir: Option<PathBuf>,
}

/// The files of a new project: (path in the project, contents).
const FILES: [(&str, &str); 5] = [
    ("main.skill.md", include_str!("init/main.skill.md")),
    (
        "skills/greet.skill.md",
        include_str!("init/skills/greet.skill.md"),
    ),
    (
        "skills/word-count.skill.js",
        include_str!("init/skills/word-count.skill.js"),
    ),
    ("skillgate.yaml", include_str!("init/skillgate.yaml")),
    (".gitignore", include_str!("init/gitignore")),
];

/// Writes the project; refuses (exit 2, nothing written) when any of its files already exists.
pub fn run(args: &InitArgs, project: &Path) -> ExitCode {
    let dir = args.dir.clone().unwrap_or_else(|| project.to_path_buf());
    let taken: Vec<String> = FILES
        .iter()
        .map(|(rel, _)| dir.join(rel))
        .filter(|path| path.exists())
        .map(|path| path.display().to_string())
        .collect();
    if !taken.is_empty() {
        eprintln!(
            "error: not initializing {}: these files exist already (nothing was written): {}",
            dir.display(),
            taken.join(", ")
        );
        return ExitCode::from(USAGE);
    }
    if let Err(err) = write_all(&dir) {
        eprintln!("error: {err}");
        return ExitCode::from(FAILED);
    }
    let cd = if dir == Path::new(".") {
        String::new()
    } else {
        format!("cd {} && ", dir.display())
    };
    println!("created a skillgate project in {}:", dir.display());
    for (rel, _) in FILES {
        println!("  {rel}");
    }
    println!("next: {cd}skillgate run            # runs main.skill.md");
    println!("      skillgate run greet --name Ada");
    println!("      skillgate serve                # http://127.0.0.1:8080");
    ExitCode::SUCCESS
}

fn write_all(dir: &Path) -> Result<(), String> {
    for (rel, text) in FILES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
