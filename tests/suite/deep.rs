//! Deep chains of invocations run on an ordinary thread stack.

use serde_json::{Value, json};
use skillgate::InvokeOptions;
use skillgate::skills::tool::Tool;

use crate::support::common::{Project, native, plain};

/// A skill that invokes itself `n` times and answers `n`: each level is a full pipeline with
/// its own middleware invocations.
fn countdown() -> Tool {
    native(
        "name: countdown\ndescription: Counts down.\n",
        |ctx, args| async move {
            let n = args["n"].as_u64().unwrap_or(0);
            if n == 0 {
                return Ok(Some(json!(0)));
            }
            let below = ctx
                .invoke("countdown", json!({ "n": n - 1 }), InvokeOptions::default())
                .await?;
            let depth = below.and_then(|v| v.as_u64()).unwrap_or(0);
            Ok(Some(Value::from(depth + 1)))
        },
    )
}

#[tokio::test]
async fn a_skill_can_invoke_itself_two_hundred_levels_deep() {
    let p = Project::new();
    let kernel = p.builder().native(countdown()).build();
    let out = kernel
        .invoke("countdown", json!({ "n": 200 }), InvokeOptions::default())
        .await
        .expect("deep chain runs");
    assert_eq!(plain(out), Some(json!(200)));
}

/// Over HTTP the run starts inside the gateway's dispatch, not at the top of a test: the same
/// depth must still fit.
#[tokio::test]
async fn a_skill_invoked_over_http_can_invoke_itself_two_hundred_levels_deep() {
    use crate::support::server::{TestServer, config};
    let mut server =
        TestServer::start_with(Project::new(), config(), |b| b.native(countdown())).await;
    let response = server
        .post_json("/invoke/countdown", &json!({ "n": 200 }))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"], json!(200));
    server.finish().await;
}
