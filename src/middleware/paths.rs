//! `paths`: sets the served context's search paths (`locals.config.paths`) and re-resolves its
//! tool through them (`refresh`). Relative paths are taken from `locals.config.cwd`.

use serde_json::Value;

use crate::error::SkillError;
use crate::skills::native::{metadata_middleware, pass};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "paths",
        "Sets the skill search paths for the served skill and what it invokes.",
        |target, args| async move {
            let list: Vec<Value> = match &*args {
                Value::String(s) => vec![Value::String(s.clone())],
                Value::Array(items) if items.iter().all(Value::is_string) => items.clone(),
                other => {
                    return Err(target.fail(SkillError::config(format!(
                        "`paths` must be a folder or a list of folders, got {other}"
                    ))));
                }
            };
            target.set("locals.config.paths", Value::Array(list))?;
            target.refresh().map_err(|e| target.fail(e))?;
            pass(&target).await
        },
    )
}
