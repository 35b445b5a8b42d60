//! `log`: the metadata key that sets log level, tag scope and reporters for the served run.

use crate::middleware::{native, pass};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: log
description: "Configures logging for the run: { level, scope, reporter }."
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, meta-metadata]
"#,
        |ctx, args| async move {
            let target = ctx.ctx_target()?;
            if args.is_object() {
                target.configure(&args).map_err(|e| target.fail(e))?;
            }
            pass(&target).await
        },
    )
}
