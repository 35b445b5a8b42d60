//! `mcp`: mounts the MCP servers of `metadata.mcp` for the served skill: their tools join its
//! index (so the skill, its directives and what it invokes, an agent's code included, find
//! them by name) and `locals.config.mcp` says what was mounted.

use crate::error::{ErrorKind, SkillError};
use crate::mcp::client::{Pool, mount};
use crate::skills::native::{idle_without, metadata_middleware, pass, served_at, working_dir};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "mcp",
        "Mounts MCP servers; their tools become `<server>-<tool>` for the served skill.",
        |target, args| async move {
            target.check_may_mount()?;
            let cwd = working_dir(&target)?;
            let mounts = mount::parse(&args, &cwd).map_err(|e| {
                target.fail(SkillError::config(format!("{}{e}", served_at(&target))))
            })?;
            let Some(pool) = target.kernel().extension::<Pool>().cloned() else {
                return Err(target.fail(SkillError::new(
                    ErrorKind::Internal,
                    "this kernel has no MCP client (built without `crate::builtins`)",
                )));
            };
            let (tools, summary) = pool
                .mount(&mounts)
                .await
                .map_err(|e| target.fail(e.prefixed(&served_at(&target))))?;
            target.mount(tools)?;
            target.set("locals.config.mcp", summary)?;
            pass(&target).await
        },
    )
    .idle_when(|metadata, _| idle_without("mcp", metadata))
}
