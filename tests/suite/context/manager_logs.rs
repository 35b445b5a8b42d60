//! Spec 01, The Manager: `log(event)`, `tail(opts)` and `configure(opts)`.

use std::sync::Arc;

use serde_json::{Value, json};
use skillgate::context::log::{Level, LogConfig};

use super::{no_opts, skill_yaml};
use crate::support::common::{Project, Seen, Trace, native, plain};

#[tokio::test]
async fn log_defaults_type_message_tag_user_level_error() {
    let p = Project::new();
    let trace = Trace::default();
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let fields =
                    |e: &Value| format!("{} {} {} {}", e["type"], e["tag"], e["level"], e["text"]);
                trace.push(fields(&*ctx.log("hello")?));
                trace.push(fields(&*ctx.log(json!({"text": "object"}))?));
                trace.push(fields(&*ctx.log(
                    json!({"type": "progress", "tag": "build", "level": "info", "text": "50%"}),
                )?));
                for e in ctx.tail(&json!({})) {
                    trace.push(format!("tail {}", fields(&e)));
                }
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(body).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let lines = [
        r#""message" "user" "error" "hello""#,
        r#""message" "user" "error" "object""#,
        r#""progress" "build" "info" "50%""#,
    ];
    let expected: Vec<String> = lines
        .iter()
        .map(|l| l.to_string())
        .chain(lines.iter().map(|l| format!("tail {l}")))
        .collect();
    assert_eq!(trace.take(), expected);
}

#[tokio::test]
async fn log_sets_root_context_id_from_the_current_context() {
    let p = Project::new();
    let seen = Seen::default();
    let child = {
        let seen = seen.clone();
        native(&skill_yaml("c", &[]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("c", &ctx);
                let event = ctx.log(json!({"text": "x", "rootContextId": "forged"}))?;
                Ok(Some((*event).clone()))
            }
        })
    };
    let parent = native(&skill_yaml("t", &[]), |ctx, _args| async move {
        let event = ctx.invoke("c", json!({}), no_opts()).await?;
        Ok(Some(
            json!({"event": event.map(|e| (*e).clone()), "root": ctx.id()}),
        ))
    });
    let kernel = p.builder().native(parent).native(child).build();
    let out = plain(kernel.invoke("t", json!({}), no_opts()).await.unwrap()).unwrap();

    assert_eq!(out["event"]["rootContextId"], out["root"]);
    assert_eq!(out["event"]["contextId"], json!(seen.get("c").id()));
    let tail = seen.get("c").tail(&json!({"tag": "user"}));
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0]["rootContextId"], out["root"]);
}

#[tokio::test]
async fn tail_is_scoped_to_the_run() {
    let p = Project::new();
    let seen = Seen::default();
    let body = {
        let seen = seen.clone();
        native(&skill_yaml("t", &[]), move |ctx, args| {
            let seen = seen.clone();
            async move {
                seen.put("t", &ctx);
                ctx.log(json!({"tag": "probe", "text": args["text"].clone()}))?;
                if let Some(text) = args.get("child") {
                    ctx.invoke("c", json!({"text": text}), no_opts()).await?;
                }
                let texts: Vec<Value> = ctx
                    .tail(&json!({"tag": "probe"}))
                    .into_iter()
                    .map(|e| e["text"].clone())
                    .collect();
                Ok(Some(Value::Array(texts)))
            }
        })
    };
    let child = native(&skill_yaml("c", &[]), |ctx, args| async move {
        ctx.log(json!({"tag": "probe", "text": args["text"].clone()}))?;
        Ok(Some(json!("done")))
    });
    let kernel = p.builder().native(body).native(child).build();
    let first = kernel
        .invoke("t", json!({"text": "one"}), no_opts())
        .await
        .unwrap();
    let second = kernel
        .invoke("t", json!({"text": "two", "child": "two-child"}), no_opts())
        .await
        .unwrap();

    assert_eq!(plain(first), Some(json!(["one"])));
    assert_eq!(plain(second), Some(json!(["two", "two-child"])));
}

#[tokio::test]
async fn tail_filters_by_tag_type_and_last() {
    let p = Project::new();
    let body = native(&skill_yaml("t", &[]), |ctx, _args| async move {
        for (tag, kind, text) in [
            ("a", "x", "1"),
            ("b", "x", "2"),
            ("a", "y", "3"),
            ("a", "z", "4"),
            ("a", "x", "5"),
        ] {
            ctx.log(json!({"tag": tag, "type": kind, "text": text, "level": "debug"}))?;
        }
        let texts = |opts: Value| -> Value {
            ctx.tail(&opts)
                .into_iter()
                .map(|e| e["text"].clone())
                .collect()
        };
        Ok(Some(json!({
            "tag": texts(json!({"tag": "a"})),
            "type": texts(json!({"type": "x"})),
            "types": texts(json!({"type": ["y", "z"]})),
            "tag+type": texts(json!({"tag": "a", "type": "x"})),
            "tag+last": texts(json!({"tag": "a", "last": 2})),
            "last": texts(json!({"last": 1})),
        })))
    });
    let kernel = p.builder().native(body).build();
    let out = plain(kernel.invoke("t", json!({}), no_opts()).await.unwrap());

    assert_eq!(
        out,
        Some(json!({
            "tag": ["1", "3", "4", "5"],
            "type": ["1", "2", "5"],
            "types": ["3", "4"],
            "tag+type": ["1", "5"],
            "tag+last": ["4", "5"],
            "last": ["5"],
        }))
    );
}

#[tokio::test]
async fn configure_without_args_returns_settings() {
    let p = Project::new();
    let body = native(&skill_yaml("t", &[]), |ctx, _args| async move {
        Ok(Some(json!([
            ctx.configure(&Value::Null)?,
            ctx.configure(&json!({}))?
        ])))
    });
    let kernel = p
        .builder()
        .log_config(LogConfig {
            level: Level::Info,
            scope: Some(vec!["build".into()]),
            reporters: vec!["tracing".into()],
        })
        .native(body)
        .build();
    let out = plain(kernel.invoke("t", json!({}), no_opts()).await.unwrap());

    let settings = json!({"level": "info", "scope": ["build"], "reporters": ["tracing"]});
    assert_eq!(out, Some(json!([settings, settings])));
}

#[tokio::test]
async fn configure_sets_run_level_and_global() {
    let p = Project::new();
    let body = native(&skill_yaml("t", &[]), |ctx, args| async move {
        let mut out = Vec::new();
        out.push(ctx.configure(&Value::Null)?);
        if !args["set"].is_null() {
            out.push(ctx.configure(&args["set"])?);
            out.push(ctx.configure(&Value::Null)?);
            out.push(
                ctx.invoke("c", json!({}), no_opts())
                    .await?
                    .map_or(Value::Null, |v| (*v).clone()),
            );
            out.push(ctx.configure(&json!({"global": true}))?);
        }
        Ok(Some(Value::Array(out)))
    });
    let child = native(&skill_yaml("c", &[]), |ctx, _args| async move {
        Ok(Some(ctx.configure(&Value::Null)?))
    });
    let kernel = p.builder().native(body).native(child).build();
    let level = |v: &Value| v["level"].clone();
    let levels = |out: Option<Arc<Value>>| -> Vec<Value> {
        out.expect("result")
            .as_array()
            .expect("list")
            .iter()
            .map(level)
            .collect()
    };

    // Run-level: the run (children included) sees it; the global settings do not change.
    let set = json!({"set": {"level": "debug", "scope": ["probe"], "reporter": "json"}});
    let out = kernel.invoke("t", set, no_opts()).await.unwrap();
    let full = out.clone().expect("result");
    assert_eq!(levels(out), ["warn", "debug", "debug", "debug", "warn"]);
    assert_eq!(full[1]["scope"], json!(["probe"]));
    assert!(
        full[1]["reporters"]
            .as_array()
            .unwrap()
            .contains(&json!("json"))
    );
    assert_eq!(full[3]["scope"], json!(["probe"]));
    // The next run starts from the global settings again.
    let out = kernel.invoke("t", json!({}), no_opts()).await.unwrap();
    assert_eq!(levels(out), ["warn"]);

    // Global: every later run sees it.
    let set = json!({"set": {"level": "trace", "global": true}});
    let out = kernel.invoke("t", set, no_opts()).await.unwrap();
    assert_eq!(levels(out), ["warn", "trace", "trace", "trace", "trace"]);
    let out = kernel.invoke("t", json!({}), no_opts()).await.unwrap();
    assert_eq!(levels(out), ["trace"]);
}
