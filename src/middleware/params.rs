//! `params`: the metadata key that declares a skill's args schema. As middleware it puts the
//! args with the schema's top-level `default`s filled in on `locals.params` (args themselves
//! are set once and never rewritten).

use serde_json::{Map, Value};

use crate::skills::native::{metadata_middleware, pass};
use crate::skills::tool::Tool;

pub fn tool() -> Tool {
    metadata_middleware(
        "params",
        "Declares the args schema; exposes args with defaults applied as locals.params.",
        |target, schema| async move {
            let args = target.args();
            let mut params: Map<String, Value> = args.as_object().cloned().unwrap_or_default();
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (name, prop) in props {
                    if let Some(default) = prop.get("default")
                        && !params.contains_key(name)
                    {
                        params.insert(name.clone(), default.clone());
                    }
                }
            }
            target.set("locals.params", Value::Object(params))?;
            pass(&target).await
        },
    )
}
