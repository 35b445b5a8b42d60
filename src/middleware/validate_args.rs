//! `validate-args`: checks the served args against the effective `params` schema.
//!
//! The schema is read from the served context's resolved cascade (`run.middleware.params`), so
//! an inherited `params` applies too. Validators are compiled once and cached.

use serde_json::Value;

use crate::error::ErrorKind;
use crate::kernel::schema;
use crate::skills::native::{pass, pipeline_middleware};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    pipeline_middleware(
        "validate-args",
        "Validates the served skill's args against its params JSON Schema.",
        |target, _args| async move {
            let args = target.args();
            let empty = Value::Object(Default::default());
            let instance = if args.is_null() { &empty } else { &*args };
            schema::check_cascade(&target, "params", instance, ErrorKind::InvalidArgs, "args")?;
            pass(&target).await
        },
    )
    .idle_when(|metadata, _| crate::skills::native::idle_without("params", metadata))
}
