//! Spec 01, Serialization: on demand, data properties only, `[Circular]`, non-serializable
//! values dropped, nesting cut at depth 8, the in-memory context untouched.

use std::sync::Arc;

use serde_json::json;

use super::{get, nested, no_opts, recorder, spy};
use crate::support::common::{Project, Seen};

#[tokio::test]
async fn serialization_has_the_data_properties_and_no_manager() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p.builder().native(recorder("t", &[], &seen)).build();
    kernel
        .invoke("t", json!({"a": 1}), no_opts())
        .await
        .unwrap();

    let t = seen.get("t");
    let v = t.to_json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["envelope", "args", "locals", "nonlocals", "globals", "run"]
    );
    assert_eq!(v["envelope"]["id"], json!(t.id()));
    assert_eq!(v["args"], json!({"a": 1}));
    assert_eq!(v["run"]["tool"]["name"], json!("t"));
}

#[tokio::test]
async fn serialization_replaces_a_self_target_with_circular() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(recorder("t", &["m"], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, m) = (seen.get("t"), seen.get("m"));
    assert_eq!(t.to_json()["envelope"]["target"], json!("[Circular]"));
    // A middleware's target is another context: serialized, with its own self-target cut.
    let served = &m.to_json()["envelope"]["target"];
    assert_eq!(served["envelope"]["id"], json!(t.id()));
    assert_eq!(served["envelope"]["target"], json!("[Circular]"));
    // The in-memory context keeps the real reference.
    assert!(t.target().same(&t));
}

#[tokio::test]
async fn serialization_drops_non_serializable_values() {
    struct Socket;
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p.builder().native(recorder("t", &[], &seen)).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let t = seen.get("t");
    t.set("locals.name", json!("kept")).unwrap();
    t.set_extension("locals.socket", Arc::new(Socket));
    let v = t.to_json();
    assert_eq!(v["locals"]["name"], json!("kept"));
    assert!(
        v["locals"].get("socket").is_none(),
        "undefined, not a value"
    );
    assert!(!v.to_string().contains("socket"));
}

#[tokio::test]
async fn serialization_cuts_nesting_at_depth_8() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p.builder().native(recorder("t", &[], &seen)).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let t = seen.get("t");
    t.set("locals.deep", nested(12)).unwrap();
    t.set("locals.list", json!([[[[[[[[[["leaf"]]]]]]]]]]))
        .unwrap();
    let v = t.to_json();
    assert_eq!(v, t.to_json_depth(8), "the default depth is 8");
    // Level 1 is the context, 2 `locals`, 3 `deep`; levels 4 to 8 are the first five `d`s.
    let mut node = &v["locals"]["deep"];
    let mut level = 3;
    while let Some(inner) = node.get("d") {
        assert!(node.is_object(), "level {level} is kept");
        node = inner;
        level += 1;
    }
    assert_eq!((level, node), (9, &json!("[Object]")));
    let mut node = &v["locals"]["list"];
    let mut level = 3;
    while let Some(inner) = node.get(0) {
        node = inner;
        level += 1;
    }
    assert_eq!((level, node), (9, &json!("[Array]")));
    // The limit is a parameter.
    assert_eq!(
        t.to_json_depth(4)["locals"]["deep"],
        json!({"d": {"d": "[Object]"}})
    );
}

#[tokio::test]
async fn serialization_leaves_the_in_memory_context_intact() {
    struct Socket(u16);
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p.builder().native(recorder("t", &[], &seen)).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let t = seen.get("t");
    t.set("locals.deep", nested(12)).unwrap();
    t.set_extension("locals.socket", Arc::new(Socket(8080)));
    let cut = t.to_json_depth(2);
    assert_eq!(cut["locals"]["deep"], json!("[Object]"));
    assert_eq!(get(&t, "locals.deep"), Some(nested(12)));
    assert_eq!(
        t.extension::<Socket>("locals.socket").map(|s| s.0),
        Some(8080)
    );
}

#[tokio::test]
async fn a_value_stored_again_at_a_path_replaces_it_and_only_nonlocals_paths_reach_below() {
    struct Socket(u16);
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(super::caller("p", &[], "c", &seen))
        .native(recorder("c", &[], &seen))
        .build();
    kernel.invoke("p", json!({}), no_opts()).await.unwrap();
    let (parent, child) = (seen.get("p"), seen.get("c"));

    parent.set_extension("nonlocals.socket", Arc::new(Socket(1)));
    parent.set_extension("locals.socket", Arc::new(Socket(2)));
    parent.set_extension("nonlocals.socket", Arc::new(Socket(3)));
    let port = |ctx: &skillgate::Context, path: &str| ctx.extension::<Socket>(path).map(|s| s.0);
    assert_eq!(
        port(&parent, "nonlocals.socket"),
        Some(3),
        "the later value"
    );
    assert_eq!(port(&parent, "locals.socket"), Some(2));
    // A child finds its ancestors' `nonlocals.*` values, not their `locals.*` ones.
    assert_eq!(port(&child, "nonlocals.socket"), Some(3));
    assert_eq!(port(&child, "locals.socket"), None);
    // A child's own value at the path is found before its parent's.
    child.set_extension("nonlocals.socket", Arc::new(Socket(4)));
    assert_eq!(port(&child, "nonlocals.socket"), Some(4));
    assert_eq!(port(&parent, "nonlocals.socket"), Some(3));
}
