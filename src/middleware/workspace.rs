//! `workspace`: gives the served skill a folder to write in (`locals.config.workspace`), taken
//! from `locals.config.cwd` when relative and created when missing. `workspace: true` is
//! `.skillgate/workspaces/<skill name>` under the working folder.

use std::path::PathBuf;

use serde_json::Value;

use crate::error::SkillError;
use crate::skills::native::{metadata_middleware, pass, working_dir};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "workspace",
        "Gives the served skill a folder to write in, created when missing.",
        |target, args| async move {
            let relative = match &*args {
                Value::String(dir) if !dir.trim().is_empty() => PathBuf::from(dir),
                Value::Bool(true) => {
                    PathBuf::from(".skillgate/workspaces").join(target.tool_name())
                }
                other => {
                    return Err(target.fail(SkillError::config(format!(
                        "`workspace` of `{}` ({}) must be a folder path or `true`, got {other}",
                        target.tool_name(),
                        target.tool().location()
                    ))));
                }
            };
            let base = working_dir(&target)?;
            let path = std::path::absolute(base.join(relative))
                .map_err(|e| target.fail(SkillError::config(format!("`workspace`: {e}"))))?;
            if let Err(e) = tokio::fs::create_dir_all(&path).await {
                return Err(target.fail(SkillError::config(format!(
                    "`workspace` of `{}`: cannot create `{}`: {e}",
                    target.tool_name(),
                    path.display()
                ))));
            }
            target.set(
                "locals.config.workspace",
                Value::String(path.display().to_string()),
            )?;
            pass(&target).await
        },
    )
}
