//! `execute`: runs the served tool's body (native code, or the template's expanded prompt).

use crate::kernel::chain::run_body;
use crate::skills::native::pipeline_middleware;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    pipeline_middleware(
        "execute",
        "Runs the served skill's own body at the bottom of the chain.",
        |target, _args| async move {
            match run_body(&target).await? {
                Some(value) => Ok(Some(value)),
                // A body that returns nothing lets `$post-execute` middleware run.
                None => {
                    target.next().await?;
                    Ok(None)
                }
            }
        },
    )
}
