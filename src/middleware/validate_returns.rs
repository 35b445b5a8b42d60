//! `validate-returns`: checks the served result against the effective `returns` schema.

use crate::error::ErrorKind;
use crate::kernel::schema;
use crate::skills::native::pipeline_middleware;
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    pipeline_middleware(
        "validate-returns",
        "Validates the served skill's result against its returns JSON Schema.",
        |target, _args| async move {
            let result = target.next().await?;
            let instance = result.as_deref().unwrap_or(&serde_json::Value::Null);
            schema::check_cascade(
                &target,
                "returns",
                instance,
                ErrorKind::InvalidReturns,
                "results",
            )?;
            Ok(None)
        },
    )
    .idle_when(|metadata, _| crate::skills::native::idle_without("returns", metadata))
}
