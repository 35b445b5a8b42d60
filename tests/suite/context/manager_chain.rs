//! Spec 01, The Manager: moving through the chain with `next()`, `refresh()`, `inject()`,
//! `finish()` and `fail()`.

use std::sync::Arc;

use futures::FutureExt;
use serde_json::{Value, json};
use skillgate::Context;
use skillgate::cascade::{Entry, EntryKind};

use super::{mw_yaml, no_opts, skill_yaml};
use crate::support::common::{Project, Seen, Trace, native, plain};

#[tokio::test]
async fn next_returns_locals_result() {
    let p = Project::new();
    let trace = Trace::default();
    let outer = {
        let trace = trace.clone();
        native(&mw_yaml("outer"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                let first = target.next().await?;
                let current = target.result();
                trace.push(format!("outer: {first:?} == {current:?}"));
                let again = target.next().await?;
                trace.push(format!("again: {again:?}"));
                let upper = first.and_then(|v| v.as_str().map(str::to_uppercase));
                Ok(upper.map(Value::String))
            }
        })
    };
    let inner = native(&mw_yaml("inner"), |ctx, _args| async move {
        let target = ctx.ctx_target()?;
        target.set("locals.result", json!("from-inner"))?;
        target.next().await?;
        Ok(None)
    });
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &["outer", "inner"]), move |_ctx, _args| {
            let trace = trace.clone();
            async move {
                trace.push("body");
                Ok(None)
            }
        })
    };
    let kernel = p.builder().native(outer).native(inner).native(body).build();
    let out = kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let value = r#"Some(String("from-inner"))"#;
    assert_eq!(
        trace.take(),
        [
            "body".to_string(),
            format!("outer: {value} == {value}"),
            format!("again: {value}"),
        ]
    );
    assert_eq!(plain(out), Some(json!("FROM-INNER")));
}

#[tokio::test]
async fn refresh_re_resolves_the_tool_through_config_paths() {
    let p = Project::new();
    p.skill(
        "x.skill.md",
        "---\nname: x\ndescription: first\nmetadata:\n  m: true\n---\none",
    );
    p.write(
        "alt/x.skill.md",
        "---\nname: x\ndescription: second\n---\ntwo",
    );
    let trace = Trace::default();
    let refresher = {
        let trace = trace.clone();
        native(&mw_yaml("m"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                let show = |target: &Context| -> skillgate::Result<String> {
                    Ok(format!(
                        "{} {} {}",
                        target.get("run.tool.description")?.unwrap_or_default(),
                        target.get("locals.prompt.raw")?.unwrap_or_default(),
                        target.get("run.origin.uri")?.unwrap_or_default()
                    ))
                };
                trace.push(show(&target)?);
                target.set("locals.config.paths", json!(["alt"]))?;
                target.refresh()?;
                trace.push(show(&target)?);
                target.next().await?;
                Ok(None)
            }
        })
    };
    let kernel = p.builder().native(refresher).build();
    let out = kernel.invoke("x", json!({}), no_opts()).await.unwrap();

    let uri = |rel: &str| {
        let path = std::path::absolute(p.path().join(rel)).unwrap();
        json!(format!("file://{}", path.display()))
    };
    assert_eq!(
        trace.take(),
        [
            format!("\"first\" \"one\" {}", uri("skills/x.skill.md")),
            format!("\"second\" \"two\" {}", uri("alt/x.skill.md")),
        ]
    );
    assert_eq!(plain(out), Some(json!("two")), "the re-resolved tool ran");
}

#[tokio::test]
async fn paths_middleware_refreshes_the_tool() {
    let p = Project::new();
    p.skill(
        "x.skill.md",
        "---\nname: x\ndescription: first\nmetadata:\n  paths: [alt]\n---\none",
    );
    p.write(
        "alt/x.skill.md",
        "---\nname: x\ndescription: second\n---\ntwo",
    );
    let kernel = p.kernel();
    let out = kernel.invoke("x", json!({}), no_opts()).await.unwrap();
    assert_eq!(plain(out), Some(json!("two")));
}

#[tokio::test]
async fn inject_inserts_after_the_current_position() {
    let p = Project::new();
    let trace = Trace::default();
    let step = |name: &'static str, trace: &Trace| {
        let trace = trace.clone();
        native(&mw_yaml(name), move |ctx, args| {
            let trace = trace.clone();
            async move {
                trace.push(format!("{name} {args}"));
                ctx.ctx_target()?.next().await?;
                Ok(None)
            }
        })
    };
    let injector = {
        let trace = trace.clone();
        native(&mw_yaml("m1"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push("m1");
                let fn_trace = trace.clone();
                let direct = Entry {
                    kind: EntryKind::Fn(Arc::new(move |served: Context| {
                        let trace = fn_trace.clone();
                        async move {
                            trace.push("m3 (fn)");
                            served.next().await?;
                            Ok(None)
                        }
                        .boxed()
                    })),
                    ..Entry::tool("m3", Arc::new(Value::Null))
                };
                target.inject(vec![Entry::tool("m2", Arc::new(json!({"k": 2}))), direct])?;
                target.next().await?;
                Ok(None)
            }
        })
    };
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &["m1", "m4"]), move |_ctx, _args| {
            let trace = trace.clone();
            async move {
                trace.push("body");
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(injector)
        .native(step("m2", &trace))
        .native(step("m4", &trace))
        .native(body)
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    assert_eq!(
        trace.take(),
        ["m1", r#"m2 {"k":2}"#, "m3 (fn)", "m4 true", "body"]
    );
}

#[tokio::test]
async fn finish_sets_result_and_stops_the_chain() {
    let p = Project::new();
    let trace = Trace::default();
    let outer = {
        let trace = trace.clone();
        native(&mw_yaml("outer"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let out = ctx.ctx_target()?.next().await?;
                trace.push(format!("outer got {out:?}"));
                Ok(None)
            }
        })
    };
    let finisher = {
        let trace = trace.clone();
        native(&mw_yaml("fin"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                target.finish(json!("early"));
                trace.push(format!("finished: {}", target.is_finished()));
                let out = target.next().await?;
                trace.push(format!("next after finish: {out:?}"));
                Ok(None)
            }
        })
    };
    let late = {
        let trace = trace.clone();
        native(&mw_yaml("late"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                trace.push("late");
                ctx.ctx_target()?.next().await?;
                Ok(None)
            }
        })
    };
    let body = {
        let trace = trace.clone();
        native(
            &skill_yaml("t", &["outer", "fin", "late"]),
            move |_ctx, _args| {
                let trace = trace.clone();
                async move {
                    trace.push("body");
                    Ok(Some(json!("body")))
                }
            },
        )
    };
    let kernel = p
        .builder()
        .native(outer)
        .native(finisher)
        .native(late)
        .native(body)
        .build();
    let out = kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    assert_eq!(plain(out), Some(json!("early")));
    let early = r#"Some(String("early"))"#;
    assert_eq!(
        trace.take(),
        [
            "finished: true".to_string(),
            format!("next after finish: {early}"),
            format!("outer got {early}"),
        ]
    );
}

#[tokio::test]
async fn fail_sets_locals_error_and_unwinds() {
    let p = Project::new();
    let trace = Trace::default();
    let outer = {
        let trace = trace.clone();
        native(&mw_yaml("outer"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push(format!("outer before: {:?}", target.error().is_some()));
                match target.next().await {
                    Ok(out) => {
                        trace.push(format!("outer ok {out:?}"));
                        Ok(None)
                    }
                    Err(err) => {
                        trace.push(format!(
                            "outer caught {} / locals.error {:?}",
                            err.message(),
                            target.get("locals.error.message")?
                        ));
                        Err(err)
                    }
                }
            }
        })
    };
    let failer = {
        let trace = trace.clone();
        native(&mw_yaml("failer"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push("failer");
                Err(target.fail("boom"))
            }
        })
    };
    let late = {
        let trace = trace.clone();
        native(&mw_yaml("late"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                trace.push("late");
                ctx.ctx_target()?.next().await?;
                Ok(None)
            }
        })
    };
    let seen = Seen::default();
    let body = {
        let (trace, seen) = (trace.clone(), seen.clone());
        native(
            &skill_yaml("t", &["outer", "failer", "late"]),
            move |ctx, _args| {
                let (trace, seen) = (trace.clone(), seen.clone());
                async move {
                    seen.put("t", &ctx);
                    trace.push("body");
                    Ok(Some(json!("body")))
                }
            },
        )
    };
    let kernel = p
        .builder()
        .native(outer)
        .native(failer)
        .native(late)
        .native(body)
        .build();
    let err = kernel.invoke("t", json!({}), no_opts()).await.unwrap_err();

    assert_eq!(err.message(), "boom");
    assert_eq!(
        trace.take(),
        [
            "outer before: false",
            "failer",
            r#"outer caught boom / locals.error Some(String("boom"))"#,
        ]
    );
}
