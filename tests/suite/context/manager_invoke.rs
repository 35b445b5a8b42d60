//! Spec 01, The Manager: `invoke(ref, args, options)`: an isolated child context, a name or an
//! inline definition, the context seed, extra middleware, `detached`.

use std::sync::Arc;

use serde_json::json;
use skillgate::{Context, InvokeOptions, SkillError, ToolRef};
use tokio::sync::oneshot;

use super::{HANG_GUARD, Shared, get, mw_yaml, no_opts, recorder, shared, skill_yaml, spy};
use crate::support::common::{Project, Seen, Trace, native, plain};

#[tokio::test]
async fn invoke_creates_an_isolated_child_context() {
    let p = Project::new();
    let seen = Seen::default();
    let trace = Trace::default();
    let parent = {
        let (seen, trace) = (seen.clone(), trace.clone());
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let (seen, trace) = (seen.clone(), trace.clone());
            async move {
                seen.put("t", &ctx);
                let one = ctx.invoke("c", json!({"n": 1}), no_opts()).await?;
                let two = ctx.invoke("c", json!({"n": 2}), no_opts()).await?;
                trace.push(format!("{one:?} {two:?}"));
                Ok(Some(json!("done")))
            }
        })
    };
    let child = {
        let (seen, trace) = (seen.clone(), trace.clone());
        native(&skill_yaml("c", &[]), move |ctx, args| {
            let (seen, trace) = (seen.clone(), trace.clone());
            async move {
                seen.put("c", &ctx);
                trace.push(format!(
                    "c{} sees {:?} {:?}",
                    args["n"],
                    ctx.get("locals.mark")?,
                    ctx.get("nonlocals.mark")?
                ));
                ctx.set("locals.mark", args["n"].clone())?;
                ctx.set("nonlocals.mark", args["n"].clone())?;
                Ok(Some(json!(args["n"].as_i64().unwrap_or(0) * 10)))
            }
        })
    };
    let kernel = p.builder().native(parent).native(child).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    assert_eq!(
        trace.take(),
        [
            "c1 sees None None",
            "c2 sees None None",
            "Some(Number(10)) Some(Number(20))"
        ]
    );
    let t = seen.get("t");
    let children = seen.all("c");
    assert_eq!(children.len(), 2);
    assert!(!children[0].same(&children[1]));
    for c in &children {
        assert_eq!(c.parent().map(Context::id), Some(t.id()));
        assert_ne!(c.id(), t.id());
    }
    assert_eq!(get(&t, "locals.mark"), None);
    assert_eq!(get(&t, "nonlocals.mark"), None);
}

#[tokio::test]
async fn invoke_accepts_a_name_or_an_inline_tool_def() {
    let p = Project::new();
    let seen = Seen::default();
    let trace = Trace::default();
    let parent = {
        let (seen, trace) = (seen.clone(), trace.clone());
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let (seen, trace) = (seen.clone(), trace.clone());
            async move {
                seen.put("t", &ctx);
                let inline_seen = seen.clone();
                let inline = native("name: inline-def\n", move |ctx, args| {
                    let seen = inline_seen.clone();
                    async move {
                        seen.put("inline", &ctx);
                        Ok(Some(json!(args["x"].as_i64().unwrap_or(0) * 2)))
                    }
                });
                let by_def = ctx
                    .invoke(ToolRef::Def(Arc::new(inline)), json!({"x": 21}), no_opts())
                    .await?;
                let by_name = ctx.invoke("c", json!({}), no_opts()).await?;
                let unregistered = ctx.invoke("inline-def", json!({"x": 1}), no_opts()).await;
                trace.push(format!(
                    "{by_def:?} {by_name:?} {:?}",
                    unregistered.map_err(|e| e.kind())
                ));
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(parent)
        .native(recorder("c", &[], &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    assert_eq!(
        trace.take(),
        [r#"Some(Number(42)) Some(String("done")) Err(NotFound)"#]
    );
    let t = seen.get("t");
    assert_eq!(seen.get("inline").parent().map(Context::id), Some(t.id()));
    assert_eq!(seen.get("c").parent().map(Context::id), Some(t.id()));
}

#[tokio::test]
async fn invoke_context_seed_overlays_locals_and_nonlocals() {
    let p = Project::new();
    let seen = Seen::default();
    let parent = {
        let seen = seen.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("t", &ctx);
                ctx.set("nonlocals.shared", json!("parent"))?;
                ctx.set("nonlocals.kept", json!("parent"))?;
                let mut options = InvokeOptions::default();
                let seed = &mut options.context;
                seed.locals.insert("note".into(), json!("seeded"));
                seed.nonlocals.insert("shared".into(), json!("seeded"));
                seed.nonlocals.insert("extra".into(), json!(3));
                ctx.invoke("c", json!({}), options).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(parent)
        .native(recorder("c", &[], &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, c) = (seen.get("t"), seen.get("c"));
    assert_eq!(get(&c, "locals.note"), Some(json!("seeded")));
    assert_eq!(
        get(&c, "nonlocals.shared"),
        Some(json!("seeded")),
        "seed wins"
    );
    assert_eq!(get(&c, "nonlocals.extra"), Some(json!(3)));
    // An overlay: what the seed does not name is still there.
    assert_eq!(get(&c, "nonlocals.kept"), Some(json!("parent")));
    assert_eq!(get(&c, "nonlocals.rootContextId"), Some(json!(t.id())));
    assert!(get(&c, "locals.config.cwd").is_some());
    assert_eq!(
        get(&c, "locals.history").and_then(|h| h.as_array().map(Vec::len)),
        Some(2)
    );
    // The caller is untouched.
    assert_eq!(get(&t, "nonlocals.shared"), Some(json!("parent")));
    assert_eq!(get(&t, "nonlocals.extra"), None);
    assert_eq!(get(&t, "locals.note"), None);
}

#[tokio::test]
async fn invoke_context_seed_sets_target_and_parent() {
    let p = Project::new();
    let seen = Seen::default();
    let parent = {
        let seen = seen.clone();
        native(&skill_yaml("t", &["m"]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("t", &ctx);
                let m = seen.get("m");
                let mut options = InvokeOptions::default();
                options.context.target = Some(ctx.clone());
                options.context.parent = Some(m);
                ctx.invoke("c", json!({}), options).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(parent)
        .native(recorder("c", &[], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, c, m) = (seen.get("t"), seen.get("c"), seen.get("m"));
    assert!(c.target().same(&t));
    assert!(c.has_other_target());
    assert!(c.ctx_target().is_ok_and(|x| x.same(&t)));
    assert_eq!(c.parent().map(Context::id), Some(m.id()));
}

#[tokio::test]
async fn invoke_with_seeded_locals_middleware_does_not_cascade() {
    let served = run_with_extra_middleware(false).await;
    assert_eq!(served, ["a"]);
}

#[tokio::test]
async fn invoke_with_seeded_nonlocals_middleware_cascades() {
    let served = run_with_extra_middleware(true).await;
    assert!(served.contains(&"a".to_string()), "{served:?}");
    assert!(served.contains(&"b".to_string()), "{served:?}");
}

/// Invokes `a` (whose body invokes `b`) with extra middleware `mw` seeded in locals or in
/// nonlocals; returns the names of the tools `mw` served.
async fn run_with_extra_middleware(cascading: bool) -> Vec<String> {
    let p = Project::new();
    let trace = Trace::default();
    // A leaf middleware (`$inherit: false`). Cascaded into every pipeline below `a`, it also
    // serves `execute`; one that inherits the default pipeline would then need `execute` in its
    // own pipeline, which the invocation-time cycle check skips, and the served chain would stop.
    let extra = {
        let trace = trace.clone();
        let yaml = format!("{}  $inherit: false\n", mw_yaml("mw"));
        native(&yaml, move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push(target.tool_name().to_string());
                target.next().await?;
                Ok(None)
            }
        })
    };
    let a = native(&skill_yaml("a", &[]), |ctx, _args| async move {
        ctx.invoke("b", json!({}), no_opts())
            .await
            .map(|out| out.map(|v| (*v).clone()))
    });
    let b = native(&skill_yaml("b", &[]), |_ctx, _args| async move {
        Ok(Some(json!("b")))
    });
    let kernel = p.builder().native(extra).native(a).native(b).build();
    let mut options = InvokeOptions::default();
    let seed = if cascading {
        &mut options.context.nonlocals
    } else {
        &mut options.context.locals
    };
    seed.insert("middleware".into(), json!({"mw": true}));
    let out = kernel.invoke("a", json!({}), options).await.unwrap();
    assert_eq!(plain(out), Some(json!("b")));
    let mut served = trace.take();
    served.dedup();
    served
}

#[tokio::test]
async fn invoke_detached_does_not_wait_and_swallows_errors() {
    let p = Project::new();
    let trace = Trace::default();
    let release: Shared<oneshot::Receiver<()>> = shared();
    let done: Shared<oneshot::Sender<()>> = shared();
    let worker = {
        let (release, done, trace) = (release.clone(), done.clone(), trace.clone());
        native(&skill_yaml("w", &[]), move |_ctx, _args| {
            let (release, done, trace) = (release.clone(), done.clone(), trace.clone());
            async move {
                let rx = release.lock().take().expect("release");
                rx.await.expect("released");
                trace.push("worker ran");
                let tx = done.lock().take().expect("done");
                let _ = tx.send(());
                Err(SkillError::failed("worker failed"))
            }
        })
    };
    let parent = {
        let (release, done, trace) = (release.clone(), done.clone(), trace.clone());
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let (release, done, trace) = (release.clone(), done.clone(), trace.clone());
            async move {
                let (release_tx, release_rx) = oneshot::channel();
                let (done_tx, done_rx) = oneshot::channel();
                *release.lock() = Some(release_rx);
                *done.lock() = Some(done_tx);
                // The worker cannot finish before it is released, which happens only after
                // `invoke` returned: a waiting `invoke` would never return.
                let out = ctx.invoke("w", json!({}), InvokeOptions::detached()).await;
                trace.push(format!("invoke returned {:?}", out.map_err(|e| e.kind())));
                let missing = ctx
                    .invoke("no-such-tool", json!({}), InvokeOptions::detached())
                    .await;
                trace.push(format!("missing: {:?}", missing.map_err(|e| e.kind())));
                release_tx.send(()).expect("worker waits");
                done_rx.await.expect("worker finished");
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(worker).native(parent).build();
    let out = tokio::time::timeout(HANG_GUARD, kernel.invoke("t", json!({}), no_opts()))
        .await
        .expect("a detached invoke waited for its tool");
    assert_eq!(plain(out.unwrap()), Some(json!("done")));
    assert_eq!(
        trace.take(),
        [
            "invoke returned Ok(None)",
            "missing: Ok(None)",
            "worker ran"
        ]
    );
}
