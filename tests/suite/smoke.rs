//! Smoke test of the helpers: a markdown skill in a project runs through the pipeline.

use crate::support::common::{Project, Trace, native, plain};
use serde_json::json;
use skillgate::InvokeOptions;

#[tokio::test]
async fn a_project_skill_and_a_native_middleware_run_together() {
    let p = Project::new();
    p.skill(
        "greet.skill.md",
        "---\nname: greet\nmetadata:\n  shout: true\n---\nHi :arg[who]",
    );
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: shout\nmetadata:\n  role: middleware\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    t.push("before");
                    let out = target.next().await?;
                    t.push("after");
                    let text = out.and_then(|v| v.as_str().map(str::to_uppercase));
                    Ok(text.map(serde_json::Value::String))
                }
            },
        ))
        .build();
    let out = kernel
        .invoke("greet", json!({"who": "Ada"}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(plain(out), Some(json!("HI ADA")));
    assert_eq!(trace.take(), ["before", "after"]);
}
