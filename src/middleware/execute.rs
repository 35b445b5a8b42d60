//! `execute`: runs the served tool's body (native code, or the template's expanded prompt).

use crate::kernel::chain::run_body;
use crate::skills::native::native;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: execute
description: Runs the served skill's own body at the bottom of the chain.
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, pipeline]
"#,
        |ctx, _args| async move {
            let target = ctx.ctx_target()?;
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
