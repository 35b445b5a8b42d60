//! Spec 02, Middleware: Sources and Entry Normalization. Metadata keys that name a tool become
//! entries with the value as args; ordering comes from `$order`.

use serde_json::json;
use skillgate::InvokeOptions;

use super::{get, out_of, probe, run_named};
use crate::support::common::{Project, Trace, chain_of, passing, skill, with_args};

#[tokio::test]
async fn keys_that_do_not_name_a_tool_are_skipped_silently() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("mark", &trace))
        .native(probe(
            "name: s\nmetadata:\n  no-such-tool: { x: 1 }\n  mark: true\n",
            |ctx| get(ctx, "run.middleware.no-such-tool"),
        ))
        .build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!({"x": 1}));
    assert_eq!(trace.take(), ["mark"]);
    assert!(!chain_of(&kernel, "s").contains(&"no-such-tool".to_string()));
}

#[tokio::test]
async fn metadata_keys_map_to_tool_names_without_prefix_expansion() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("meta-mark", &trace))
        .native(passing("mark-meta", &trace))
        .native(skill("s", "  mark: true\n", &trace))
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["s"]);
}

#[tokio::test]
async fn the_metadata_value_becomes_the_middleware_args() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(skill(
            "s",
            "  mark: { level: 3, tags: [a, b] }\n  $order:\n    mark: { after: [$configure], before: [$post-configure] }\n",
            &trace,
        ))
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), [r#"mark={"level":3,"tags":["a","b"]}"#, "s"]);
}

#[tokio::test]
async fn ordering_comes_from_order_not_from_the_metadata_value() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(passing("later", &trace))
        .native(skill(
            "s",
            "  mark: { after: [later] }\n  later: true\n",
            &trace,
        ))
        .build();
    run_named(&kernel, "s").await.unwrap();
    // `after` inside the value is plain args; only `$order` orders.
    assert_eq!(trace.take(), [r#"mark={"after":["later"]}"#, "later", "s"]);
}
