//! `log`: the metadata key that sets log level, tag scope and reporters for the served run.

use crate::skills::native::{metadata_middleware, pass};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "log",
        "Configures logging for the run: { level, scope, reporter }.",
        |target, args| async move {
            if args.is_object() {
                target.configure(&args).map_err(|e| target.fail(e))?;
            }
            pass(&target).await
        },
    )
}
