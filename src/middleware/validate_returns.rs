//! `validate-returns`: checks the served result against the effective `returns` schema.

use crate::error::ErrorKind;
use crate::kernel::schema;
use crate::middleware::native;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    native(
        r#"
name: validate-returns
description: Validates the served skill's result against its returns JSON Schema.
metadata:
  role: middleware
  visibility: hidden
  tags: [meta-internal, pipeline]
"#,
        |ctx, _args| async move {
            let target = ctx.ctx_target()?;
            let result = target.next().await?;
            let holder = target.0.state.lock().run.middleware.clone();
            if let Some(validator) = ctx.kernel().schemas().validator(&holder, "returns")? {
                let instance = result
                    .as_deref()
                    .cloned()
                    .unwrap_or(serde_json::Value::Null);
                let what = format!(
                    "result of `{}` does not match its returns schema",
                    target.tool_name()
                );
                schema::check(&validator, &instance, ErrorKind::InvalidReturns, &what)
                    .map_err(|e| e.with_tool(target.tool_name()))
                    .map_err(|e| target.fail(e))?;
            }
            Ok(None)
        },
    )
}
