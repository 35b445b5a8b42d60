//! Spec 01, Properties: the `envelope` (id, parent, target, hasOtherTarget), immutable.

use serde_json::{Value, json};
use skillgate::Context;

use super::{caller, get, immutable, no_opts, recorder, skill_yaml, spy};
use crate::support::common::{Project, Seen, native};

#[tokio::test]
async fn envelope_id_is_unique() {
    let p = Project::new();
    let seen = Seen::default();
    let two_children = {
        let seen = seen.clone();
        native(&skill_yaml("t", &["m"]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("t", &ctx);
                ctx.invoke("c", json!({}), no_opts()).await?;
                ctx.invoke("c", json!({}), no_opts()).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(two_children)
        .native(recorder("c", &[], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let mut contexts = seen.all("t");
    contexts.extend(seen.all("m"));
    contexts.extend(seen.all("c"));
    assert_eq!(contexts.len(), 2 + 2 + 4);
    let mut ids: Vec<String> = contexts.iter().map(Context::id).collect();
    for (ctx, id) in contexts.iter().zip(&ids) {
        assert_eq!(get(ctx, "envelope.id"), Some(json!(id)));
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), contexts.len(), "every context has its own id");
}

#[tokio::test]
async fn envelope_is_immutable() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(recorder("t", &["m"], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    for ctx in [seen.get("t"), seen.get("m")] {
        let id = ctx.id();
        let parent = get(&ctx, "envelope.parent");
        let target = ctx.target().id();
        let other = ctx.has_other_target();
        for path in [
            "envelope",
            "envelope.id",
            "envelope.parent",
            "envelope.target",
            "envelope.hasOtherTarget",
        ] {
            assert!(
                immutable(ctx.set(path, json!("forged"))),
                "{path} must refuse writes"
            );
        }
        assert_eq!(ctx.id(), id);
        assert_eq!(get(&ctx, "envelope.id"), Some(json!(id)));
        assert_eq!(get(&ctx, "envelope.parent"), parent);
        assert_eq!(ctx.target().id(), target);
        assert_eq!(ctx.has_other_target(), other);
    }
}

#[tokio::test]
async fn envelope_parent_is_the_caller_or_null_for_root() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(caller("t", &["m"], "c", &seen))
        .native(recorder("c", &[], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, c, m) = (seen.get("t"), seen.get("c"), seen.get("m"));
    assert!(t.parent().is_none());
    assert_eq!(get(&t, "envelope.parent"), Some(Value::Null));
    assert_eq!(c.parent().map(Context::id), Some(t.id()));
    assert_eq!(get(&c, "envelope.parent.envelope.id"), Some(json!(t.id())));
    // The chain invoker invokes middleware from the served context.
    assert_eq!(m.parent().map(Context::id), Some(t.id()));
}

#[tokio::test]
async fn envelope_target_is_self_for_normal_skills() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(caller("t", &[], "c", &seen))
        .native(recorder("c", &[], &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    for ctx in [seen.get("t"), seen.get("c")] {
        assert!(ctx.target().same(&ctx), "{} serves itself", ctx.tool_name());
        assert_eq!(
            get(&ctx, "envelope.target.envelope.id"),
            Some(json!(ctx.id()))
        );
    }
}

#[tokio::test]
async fn envelope_target_is_the_served_context_for_middleware() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(recorder("t", &["m"], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, m) = (seen.get("t"), seen.get("m"));
    assert!(!m.target().same(&m));
    assert!(m.target().same(&t), "m's target is the context of t");
    assert_eq!(get(&m, "envelope.target.envelope.id"), Some(json!(t.id())));
}

#[tokio::test]
async fn has_other_target() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(recorder("t", &["m"], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, m) = (seen.get("t"), seen.get("m"));
    assert!(!t.has_other_target());
    assert_eq!(get(&t, "envelope.hasOtherTarget"), Some(json!(false)));
    assert!(m.has_other_target());
    assert_eq!(get(&m, "envelope.hasOtherTarget"), Some(json!(true)));
}
