//! Deep chains of invocations run on an ordinary thread stack.

use serde_json::{Value, json};
use skillgate::InvokeOptions;

use crate::common::{Project, native, plain};

/// A skill that invokes itself `n` times: each level is a full pipeline with its own
/// middleware invocations.
#[tokio::test]
async fn a_skill_can_invoke_itself_two_hundred_levels_deep() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(native("name: countdown\n", |ctx, args| async move {
            let n = args["n"].as_u64().unwrap_or(0);
            if n == 0 {
                return Ok(Some(json!(0)));
            }
            let below = ctx
                .invoke("countdown", json!({ "n": n - 1 }), InvokeOptions::default())
                .await?;
            let depth = below.and_then(|v| v.as_u64()).unwrap_or(0);
            Ok(Some(Value::from(depth + 1)))
        }))
        .build();
    let out = kernel
        .invoke("countdown", json!({ "n": 200 }), InvokeOptions::default())
        .await
        .expect("deep chain runs");
    assert_eq!(plain(out), Some(json!(200)));
}
