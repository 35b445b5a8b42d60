//! Spec 02, Error Handling: try/catch middleware around `next()`, inner handlers first.

use serde_json::json;
use skillgate::skills::tool::Tool;
use skillgate::{ErrorKind, SkillError};

use super::{out_of, run_named};
use crate::support::common::{Project, Trace, chain_of, native};

/// A middleware that catches errors of `next()`: records them, then rethrows or recovers.
fn handler(name: &'static str, rethrow: bool, trace: &Trace) -> Tool {
    let t = trace.clone();
    native(
        &format!("name: {name}\nmetadata:\n  role: middleware\n"),
        move |ctx, _args| {
            let t = t.clone();
            async move {
                let target = ctx.ctx_target()?;
                match target.next().await {
                    Ok(_) => t.push(format!("{name}: ok")),
                    Err(err) => {
                        t.push(format!("{name}: caught {}", err.message()));
                        if rethrow {
                            return Err(err);
                        }
                        target.set("locals.result", json!(format!("recovered by {name}")))?;
                    }
                }
                Ok(None)
            }
        },
    )
}

fn failing(name: &str, meta: &str) -> Tool {
    native(
        &format!("name: {name}\nmetadata:\n{meta}"),
        |_ctx, _args| async move { Err(SkillError::failed("boom")) },
    )
}

#[tokio::test]
async fn inner_handlers_catch_first_and_a_rethrow_reaches_the_outer_handler() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(handler("outer-h", false, &trace))
        .native(handler("inner-h", true, &trace))
        .native(failing("s", "  outer-h: true\n  inner-h: true\n"))
        .build();
    assert_eq!(
        out_of(run_named(&kernel, "s").await),
        json!("recovered by outer-h")
    );
    assert_eq!(
        trace.take(),
        ["inner-h: caught boom", "outer-h: caught boom"]
    );
}

#[tokio::test]
async fn an_error_an_inner_handler_recovers_from_does_not_reach_outer_handlers() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(handler("outer-h", false, &trace))
        .native(handler("inner-h", false, &trace))
        .native(failing("s", "  outer-h: true\n  inner-h: true\n"))
        .build();
    assert_eq!(
        out_of(run_named(&kernel, "s").await),
        json!("recovered by inner-h")
    );
    assert_eq!(trace.take(), ["inner-h: caught boom", "outer-h: ok"]);
}

#[tokio::test]
async fn errors_propagate_through_next_and_cleanup_after_it_still_runs() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: guard\nmetadata:\n  role: middleware\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    let out = target.next().await;
                    t.push("cleanup");
                    out?;
                    t.push("not reached");
                    Ok(None)
                }
            },
        ))
        .native(failing("s", "  guard: true\n"))
        .build();
    let err = run_named(&kernel, "s").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.message(), "boom");
    assert_eq!(trace.take(), ["cleanup"]);
}

#[tokio::test]
async fn an_error_handler_ordered_before_execute_recovers_by_setting_the_target_result() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(handler("my-error-handler", false, &trace))
        .native(failing(
            "s",
            "  $order:\n    my-error-handler: { after: [$pre-execute], before: [execute] }\n  my-error-handler: true\n",
        ))
        .build();
    assert_eq!(
        out_of(run_named(&kernel, "s").await),
        json!("recovered by my-error-handler")
    );
    assert_eq!(trace.take(), ["my-error-handler: caught boom"]);
    let chain = chain_of(&kernel, "s");
    let at = |n: &str| chain.iter().position(|x| x == n).expect("in the chain");
    assert!(at("my-error-handler") < at("execute"), "{chain:?}");
}
