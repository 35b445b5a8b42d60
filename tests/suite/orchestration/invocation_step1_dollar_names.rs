//! Spec 02, Invocation step 1: `$NAME` extraction. `$`-prefixed keys of args become the invoke
//! options of the same name, explicit options win, objects are merged.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;
use skillgate::{Context, InvokeOptions};

use super::{get, out_of, probe};
use crate::support::common::{Project, native, plain};

#[tokio::test]
async fn dollar_context_in_args_becomes_the_context_option() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(probe("name: probe\n", |ctx| {
            Ok(json!({
                "seeded": get(ctx, "locals.seeded")?,
                "flag": get(ctx, "nonlocals.flag")?,
            }))
        }))
        .build();
    let args = json!({"$context": {"locals": {"seeded": "yes"}, "nonlocals": {"flag": 7}}});
    let out = kernel.invoke("probe", args, InvokeOptions::default()).await;
    assert_eq!(out_of(out), json!({"seeded": "yes", "flag": 7}));
}

#[tokio::test]
async fn dollar_keys_are_removed_from_the_effective_args() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(probe("name: probe\n", |ctx| {
            let history = get(ctx, "locals.history")?;
            Ok(json!({
                "args": &*ctx.args(),
                "frame": history.as_array().and_then(|h| h.last()).map(|f| f["args"].clone()),
            }))
        }))
        .build();
    let args = json!({"who": "Ada", "$context": {"locals": {"x": 1}}});
    let out = kernel.invoke("probe", args, InvokeOptions::default()).await;
    assert_eq!(
        out_of(out),
        json!({"args": {"who": "Ada"}, "frame": {"who": "Ada"}})
    );
}

#[tokio::test]
async fn any_dollar_key_maps_to_the_invoke_option_of_the_same_name() {
    let p = Project::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    let kernel = p
        .builder()
        .native(native("name: slow\n", move |_ctx, _args| {
            let tx = tx.clone();
            async move {
                let _ = tx.send("ran");
                Ok(Some(json!("a value the caller must not wait for")))
            }
        }))
        .build();
    let out = kernel
        .invoke("slow", json!({"$detached": true}), InvokeOptions::default())
        .await
        .unwrap();
    // `$detached: true` is `options.detached`: fire and forget, no result.
    assert_eq!(plain(out), None);
    assert_eq!(rx.recv().await, Some("ran"));
}

#[tokio::test]
async fn explicit_options_win_over_the_dollar_alias() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(probe("name: probe\n", |ctx| get(ctx, "locals.mode")))
        .build();
    let mut options = InvokeOptions::default();
    options
        .context
        .locals
        .insert("mode".into(), json!("explicit"));
    let args = json!({"$context": {"locals": {"mode": "alias"}}});
    let out = kernel.invoke("probe", args, options).await;
    assert_eq!(out_of(out), json!("explicit"));
}

#[tokio::test]
async fn dollar_alias_objects_fill_missing_fields_of_explicit_options() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(probe("name: probe\n", |ctx| {
            Ok(json!({
                "cfg": get(ctx, "nonlocals.cfg")?,
                "extra": get(ctx, "nonlocals.extra")?,
                "note": get(ctx, "locals.note")?,
            }))
        }))
        .build();
    let mut options = InvokeOptions::default();
    options
        .context
        .nonlocals
        .insert("cfg".into(), json!({"a": 1}));
    let args = json!({"$context": {
        "nonlocals": {"cfg": {"a": 2, "b": 3}, "extra": true},
        "locals": {"note": "from alias"},
    }});
    let out = kernel.invoke("probe", args, options).await;
    assert_eq!(
        out_of(out),
        json!({"cfg": {"a": 1, "b": 3}, "extra": true, "note": "from alias"})
    );
}

#[tokio::test]
async fn dollar_context_adds_nonlocals_alongside_an_invoker_set_parent() {
    let p = Project::new();
    let slot: Arc<Mutex<Option<Context>>> = Arc::default();
    let keep = slot.clone();
    let take = slot.clone();
    let kernel = p
        .builder()
        .native(native("name: holder\n", move |ctx, _args| {
            let keep = keep.clone();
            async move {
                ctx.set("nonlocals.fromHolder", json!("h"))?;
                *keep.lock() = Some(ctx.clone());
                Ok(None)
            }
        }))
        .native(probe("name: probe\n", |ctx| {
            Ok(json!({
                "parent": ctx.parent().map(Context::id),
                "fromHolder": get(ctx, "nonlocals.fromHolder")?,
                "added": get(ctx, "nonlocals.added")?,
            }))
        }))
        .native(native("name: runner\n", move |ctx, _args| {
            let take = take.clone();
            async move {
                ctx.invoke("holder", json!({}), InvokeOptions::default())
                    .await?;
                let holder = take.lock().clone().expect("holder ran");
                let mut options = InvokeOptions::default();
                options.context.parent = Some(holder.clone());
                let args = json!({"$context": {"nonlocals": {"added": 1}}});
                let out = ctx.invoke("probe", args, options).await?;
                Ok(Some(
                    json!({"holder": holder.id(), "probe": out.as_deref()}),
                ))
            }
        }))
        .build();
    let out = out_of(
        kernel
            .invoke("runner", json!({}), InvokeOptions::default())
            .await,
    );
    assert_eq!(
        out["probe"],
        json!({"parent": out["holder"], "fromHolder": "h", "added": 1})
    );
}
