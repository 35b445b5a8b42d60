//! `validate-args`: checks the served args against the effective `params` schema.
//!
//! The schema is read from the served context's resolved cascade (`run.middleware.params`), so
//! an inherited `params` applies too. Validators are compiled once and cached.

use serde_json::Value;

use crate::error::ErrorKind;
use crate::kernel::schema;
use crate::middleware::{native, pass};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: validate-args
description: Validates the served skill's args against its params JSON Schema.
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, pipeline]
"#,
        |ctx, _args| async move {
            let target = ctx.ctx_target()?;
            let holder = target.0.state.lock().run.middleware.clone();
            if let Some(validator) = ctx.kernel().schemas().validator(&holder, "params")? {
                let args = target.args();
                let instance = if args.is_null() {
                    Value::Object(Default::default())
                } else {
                    (*args).clone()
                };
                let what = format!(
                    "args of `{}` do not match its params schema",
                    target.tool_name()
                );
                schema::check(&validator, &instance, ErrorKind::InvalidArgs, &what)
                    .map_err(|e| e.with_tool(target.tool_name()))
                    .map_err(|e| target.fail(e))?;
            }
            pass(&target).await
        },
    )
}
