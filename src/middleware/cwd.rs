//! `cwd`: sets the served context's working folder (`locals.config.cwd`), relative to the
//! current one; the folder must exist.

use serde_json::Value;

use crate::error::SkillError;
use crate::skills::native::{metadata_middleware, pass, working_dir};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "cwd",
        "Sets the working folder of the served skill.",
        |target, args| async move {
            let Some(dir) = args.as_str() else {
                return Err(target.fail(SkillError::config(format!(
                    "`cwd` must be a folder path, got {args}"
                ))));
            };
            let base = working_dir(&target)?;
            let path = base.join(dir);
            if !path.is_dir() {
                return Err(target.fail(SkillError::config(format!(
                    "`cwd`: `{}` is not a folder",
                    path.display()
                ))));
            }
            target.set(
                "locals.config.cwd",
                Value::String(path.display().to_string()),
            )?;
            pass(&target).await
        },
    )
}
