//! Spec 02, Leaf Middleware and Cycle Prevention: automatic static.

use serde_json::{Value, json};
use skillgate::{ErrorKind, InvokeOptions};

use super::{out_of, probe, run_named};
use crate::support::common::{
    Project, Trace, chain_of, merged_of, middleware, native, skill, with_target,
};

#[tokio::test]
async fn a_middleware_in_the_default_pipeline_does_not_run_inside_its_own_pipeline() {
    let p = Project::new();
    let bundled = include_str!("../../../skills/pipeline/default.skill.md");
    let shadow = bundled.replacen("metadata:\n", "metadata:\n  audit: true\n", 1);
    assert_ne!(shadow, bundled);
    p.skill("default-pipeline.skill.md", &shadow);
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_target("audit", &trace))
        .native(probe("name: s\n", |ctx| {
            Ok(Value::Array(ctx.tail(&json!({"type": "cycle-skipped"}))))
        }))
        .build();
    let events = out_of(
        kernel
            .invoke("s", json!({}), InvokeOptions::default())
            .await,
    );
    // Only the user skill is audited: not `audit` itself, nor the pipeline middleware.
    assert_eq!(trace.take(), ["audit@s"]);
    assert_eq!(events, json!([]));
    assert_eq!(chain_of(&kernel, "audit"), ["<body>"]);
    assert_eq!(merged_of(&kernel, "audit").get("audit"), Some(&json!(true)));
}

#[tokio::test]
async fn a_user_middleware_gets_the_full_pipeline() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(middleware(
            "strict",
            "  params:\n    type: object\n    properties:\n      level: { type: integer }\n    required: [level]\n",
            &trace,
            |n, _, a| format!("{n}={a}"),
        ))
        .native(skill("good", "  strict: { level: 2 }\n", &trace))
        .native(skill("bad", "  strict: { level: high }\n", &trace))
        .build();
    assert!(chain_of(&kernel, "strict").contains(&"validate-args".to_string()));
    run_named(&kernel, "good").await.unwrap();
    assert_eq!(trace.take(), [r#"strict={"level":2}"#, "good"]);
    // The middleware's own `validate-args` checks the args the cascade gave it.
    let err = run_named(&kernel, "bad").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs);
    assert_eq!(err.tool(), Some("strict"));
    assert!(trace.take().is_empty());
}

#[tokio::test]
async fn self_references_are_always_removed() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: selfish\nmetadata:\n  selfish: { x: 1 }\n  $dynamic: [selfish]\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    t.push("selfish");
                    Ok(Some(Value::Array(
                        ctx.tail(&json!({"type": "cycle-skipped"})),
                    )))
                }
            },
        ))
        .build();
    assert!(!chain_of(&kernel, "selfish").contains(&"selfish".to_string()));
    let events = out_of(run_named(&kernel, "selfish").await);
    assert_eq!(trace.take(), ["selfish"]);
    assert_eq!(events, json!([]));
}

#[tokio::test]
async fn automatic_static_is_recomputed_when_tool_caches_are_cleared() {
    let trace = Trace::default();
    let p = Project::new();
    let kernel = p
        .builder()
        .native(with_target("pong", &trace))
        .native(skill("ping", "  pong: true\n", &trace))
        .build();
    run_named(&kernel, "ping").await.unwrap();
    assert_eq!(trace.take(), ["pong@ping", "ping"]);
    // `pong` now names `ping` back: the two form one component and `pong` becomes data.
    kernel
        .registry()
        .register(middleware("pong", "  ping: true\n", &trace, |n, t, _| {
            format!("{n}@{t}")
        }));
    run_named(&kernel, "ping").await.unwrap();
    assert_eq!(trace.take(), ["ping"]);
}
