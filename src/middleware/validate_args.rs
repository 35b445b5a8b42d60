//! `validate-args`: checks the served args against the effective `params` schema.
//!
//! The schema is read from the served context's resolved cascade (`run.middleware.params`), so
//! an inherited `params` applies too. Validators are compiled once and cached.

use serde_json::Value;

use crate::error::ErrorKind;
use crate::kernel::schema;
use crate::skills::native::{native, pass};
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
            let args = target.args();
            let empty = Value::Object(Default::default());
            let instance = if args.is_null() { &empty } else { &*args };
            schema::check_cascade(&target, "params", instance, ErrorKind::InvalidArgs, "args")?;
            pass(&target).await
        },
    )
    .idle_when(|metadata, _| crate::skills::native::idle_without("params", metadata))
}
