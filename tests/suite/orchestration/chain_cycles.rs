//! Spec 02, The Middleware Chain rules on cycles: in order constraints (an error), in the
//! invocation stack (skipped with a warning), and independent invocations (not cycles).

use serde_json::{Value, json};
use skillgate::{ErrorKind, InvokeOptions};

use super::{out_of, probe};
use crate::support::common::{Project, Trace, middleware, native, passing, skill};

#[tokio::test]
async fn cycles_in_order_constraints_are_a_configuration_error_naming_the_cycle() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("ca", &trace))
        .native(passing("cb", &trace))
        .native(skill(
            "s",
            "  ca: true\n  cb: true\n  $order:\n    ca: { after: [cb] }\n    cb: { after: [ca] }\n",
            &trace,
        ))
        .build();
    let err = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let msg = err.message();
    assert!(
        msg.contains("ca -> cb -> ca") || msg.contains("cb -> ca -> cb"),
        "{msg}"
    );
    assert!(trace.take().is_empty());
}

#[tokio::test]
async fn invocation_stack_cycles_are_skipped_with_a_warning() {
    let p = Project::new();
    let trace = Trace::default();
    // `ma`'s pipeline runs `mb`, whose pipeline runs `ma` again (`$dynamic` bypasses automatic
    // static, so only the invocation-time check can stop it).
    let kernel = p
        .builder()
        .native(middleware(
            "ma",
            "  mb: true\n  $dynamic: [mb]\n",
            &trace,
            |n, t, _| format!("{n}@{t}"),
        ))
        .native(middleware(
            "mb",
            "  ma: true\n  $dynamic: [ma]\n",
            &trace,
            |n, t, _| format!("{n}@{t}"),
        ))
        .native(probe("name: s\nmetadata:\n  ma: true\n", |ctx| {
            Ok(Value::Array(ctx.tail(&json!({"type": "cycle-skipped"}))))
        }))
        .build();
    let events = out_of(
        kernel
            .invoke("s", json!({}), InvokeOptions::default())
            .await,
    );
    assert_eq!(trace.take(), ["mb@ma", "ma@s"]);
    let events = events.as_array().expect("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["level"], json!("warn"));
    assert_eq!(events[0]["entry"], json!("ma"));
}

#[tokio::test]
async fn independent_invocations_of_the_same_middleware_are_not_cycles() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: mw\nmetadata:\n  role: middleware\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    t.push(format!("mw@{}", target.tool_name()));
                    if target.tool_name() == "outer" {
                        // A separate pipeline started from inside `mw` runs `mw` again.
                        ctx.invoke("inner", json!({}), InvokeOptions::default())
                            .await?;
                    }
                    target.next().await?;
                    Ok(None)
                }
            },
        ))
        .native(skill("inner", "  mw: true\n", &trace))
        .native(probe("name: outer\nmetadata:\n  mw: true\n", |ctx| {
            Ok(Value::Array(ctx.tail(&json!({"type": "cycle-skipped"}))))
        }))
        .build();
    let events = out_of(
        kernel
            .invoke("outer", json!({}), InvokeOptions::default())
            .await,
    );
    assert_eq!(trace.take(), ["mw@outer", "mw@inner", "inner"]);
    assert_eq!(events, json!([]));
}
