//! `validate-allowed-tools`: installs the served skill's `allowed-tools` policy, so every
//! `invoke` the skill makes is checked (names, `#tags`, `name(k=v)` arg constraints).

use std::sync::Arc;

use crate::error::SkillError;
use crate::skills::native::{pass, pipeline_middleware};
use crate::skills::patterns::AllowedTools;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    pipeline_middleware(
        "validate-allowed-tools",
        "Restricts what the served skill may invoke to its allowed-tools patterns.",
        |target, _args| async move {
            let spec = target.metadata("allowed-tools").filter(|v| !v.is_null());
            if let Some(spec) = spec {
                let policy = AllowedTools::parse(&spec).map_err(|e| {
                    target.fail(SkillError::config(format!("`{}`: {e}", target.tool_name())))
                })?;
                target.restrict_tools(Some(Arc::new(policy)));
            }
            pass(&target).await
        },
    )
    .idle_when(|metadata, _| crate::skills::native::idle_without("allowed-tools", metadata))
}
