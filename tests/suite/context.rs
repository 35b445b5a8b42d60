//! Spec 01: the context object and its manager, one test per normative rule.
//!
//! Tool bodies record what they see (contexts in a [`Seen`], strings in a [`Trace`]) and the
//! assertions run on those records after the invocation, so a rule that breaks shows up as a
//! wrong value rather than as a panic inside a pipeline.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use skillgate::cascade::{Entry, EntryKind};
use skillgate::context::log::{Level, LogConfig};
use skillgate::skills::tool::Tool;
use skillgate::{Context, ErrorKind, InvokeOptions, SkillError, ToolRef};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::common::{Project, Seen, Trace, native, plain};

/// A generous bound on waits that only end if a rule holds, so a broken rule fails the test
/// instead of hanging it. Never a timing assertion: passing runs finish long before it.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A one-shot channel end shared with a tool body (bodies are `Fn`, so they take it out).
type Shared<T> = Arc<Mutex<Option<T>>>;

fn shared<T>() -> Shared<T> {
    Arc::new(Mutex::new(None))
}

/// YAML frontmatter of a native middleware named `name`.
fn mw_yaml(name: &str) -> String {
    format!("name: {name}\nmetadata:\n  role: middleware\n")
}

/// YAML frontmatter of a native skill `name` whose metadata turns on middleware `keys`.
fn skill_yaml(name: &str, keys: &[&str]) -> String {
    let mut yaml = format!("name: {name}\nmetadata:\n  tags: [test]\n");
    for key in keys {
        yaml.push_str(&format!("  {key}: true\n"));
    }
    yaml
}

/// A middleware that records its own context as `name` and passes to the served chain.
fn spy(name: &str, seen: &Seen) -> Tool {
    let seen = seen.clone();
    let label = name.to_string();
    native(&mw_yaml(name), move |ctx, _args| {
        let seen = seen.clone();
        let label = label.clone();
        async move {
            seen.put(&label, &ctx);
            let target = ctx.ctx_target()?;
            target.next().await?;
            Ok(None)
        }
    })
}

/// A native skill that records its context as `name` and returns `"done"`.
fn recorder(name: &str, keys: &[&str], seen: &Seen) -> Tool {
    let seen = seen.clone();
    let label = name.to_string();
    native(&skill_yaml(name, keys), move |ctx, _args| {
        let seen = seen.clone();
        let label = label.clone();
        async move {
            seen.put(&label, &ctx);
            Ok(Some(json!("done")))
        }
    })
}

/// A native skill `name` that records its context and invokes `child` once.
fn caller(name: &str, keys: &[&str], child: &str, seen: &Seen) -> Tool {
    let seen = seen.clone();
    let label = name.to_string();
    let child = child.to_string();
    native(&skill_yaml(name, keys), move |ctx, _args| {
        let seen = seen.clone();
        let label = label.clone();
        let child = child.clone();
        async move {
            seen.put(&label, &ctx);
            ctx.invoke(child.as_str(), json!({}), InvokeOptions::default())
                .await?;
            Ok(Some(json!("done")))
        }
    })
}

fn get(ctx: &Context, path: &str) -> Option<Value> {
    ctx.get(path)
        .unwrap_or_else(|e| panic!("get({path}) failed: {e}"))
}

fn no_opts() -> InvokeOptions {
    InvokeOptions::default()
}

fn immutable(result: skillgate::Result<()>) -> bool {
    matches!(result, Err(e) if e.kind() == ErrorKind::Immutable)
}

/// `{"d": {"d": ... "leaf"}}` with `levels` objects.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!("leaf"), |inner, _| json!({ "d": inner }))
}

// ---------------------------------------------------------------------------------------------
// Properties: envelope
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Properties: args, locals, nonlocals, globals
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn args_are_set_once() {
    let p = Project::new();
    let trace = Trace::default();
    let overwriter = {
        let trace = trace.clone();
        native(&mw_yaml("m"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                for path in ["args", "args.who", "args.extra"] {
                    let refused = immutable(target.set(path, json!("Eve")));
                    trace.push(format!("{path} refused: {refused}"));
                }
                target.next().await?;
                Ok(None)
            }
        })
    };
    let body = native(&skill_yaml("t", &["m"]), |ctx, args| async move {
        Ok(Some(
            json!({ "body": *args, "ctx": *ctx.args(), "get": ctx.get("args")? }),
        ))
    });
    let kernel = p.builder().native(overwriter).native(body).build();
    let out = kernel
        .invoke("t", json!({"who": "Ada"}), no_opts())
        .await
        .unwrap();

    let original = json!({"who": "Ada"});
    assert_eq!(
        plain(out),
        Some(json!({ "body": original, "ctx": original, "get": original }))
    );
    assert_eq!(
        trace.take(),
        [
            "args refused: true",
            "args.who refused: true",
            "args.extra refused: true"
        ]
    );
}

#[tokio::test]
async fn history_is_append_only() {
    let p = Project::new();
    let seen = Seen::default();
    let trace = Trace::default();
    let parent = {
        let (seen, trace) = (seen.clone(), trace.clone());
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let (seen, trace) = (seen.clone(), trace.clone());
            async move {
                seen.put("t", &ctx);
                trace.push(format!(
                    "replace refused: {}",
                    immutable(ctx.set("locals.history", json!([])))
                ));
                trace.push(format!(
                    "frame edit refused: {}",
                    immutable(ctx.set("locals.history.0.tool", json!("forged")))
                ));
                ctx.push_history("note", json!({"k": 1}));
                ctx.invoke("c", json!({}), no_opts()).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let child = {
        let seen = seen.clone();
        native(&skill_yaml("c", &[]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                ctx.push_history("child-note", json!(null));
                seen.put("c", &ctx);
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(parent).native(child).build();
    kernel
        .invoke("t", json!({"a": 1}), no_opts())
        .await
        .unwrap();

    assert_eq!(
        trace.take(),
        ["replace refused: true", "frame edit refused: true"]
    );
    let tools = |ctx: &Context| -> Vec<Value> {
        get(ctx, "locals.history")
            .and_then(|h| h.as_array().cloned())
            .expect("history is an array")
            .into_iter()
            .map(|f| f["tool"].clone())
            .collect()
    };
    let (t, c) = (seen.get("t"), seen.get("c"));
    // The parent's frames stay as they were: appended to, never rewritten, and the child's
    // frames went onto the child's stack only.
    assert_eq!(tools(&t), [json!("t"), json!("note")]);
    assert_eq!(get(&t, "locals.history.1.args"), Some(json!({"k": 1})));
    assert_eq!(
        tools(&c),
        [json!("t"), json!("note"), json!("c"), json!("child-note")]
    );
}

#[tokio::test]
async fn history_frames_are_tool_args_and_timestamp() {
    let p = Project::new();
    let seen = Seen::default();
    let parent = native(&skill_yaml("t", &[]), |ctx, _args| async move {
        ctx.invoke("c", json!({"b": 2}), no_opts()).await?;
        Ok(Some(json!("done")))
    });
    let kernel = p
        .builder()
        .native(parent)
        .native(recorder("c", &[], &seen))
        .build();
    let before = now_ms();
    kernel
        .invoke("t", json!({"a": 1}), no_opts())
        .await
        .unwrap();
    let after = now_ms();

    let history = get(&seen.get("c"), "locals.history").expect("history");
    let frames = history.as_array().expect("an array of frames");
    assert_eq!(frames.len(), 2, "{history}");
    for (frame, (tool, args)) in frames
        .iter()
        .zip([("t", json!({"a": 1})), ("c", json!({"b": 2}))])
    {
        let keys: Vec<&str> = frame
            .as_object()
            .expect("frame")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["tool", "args", "timestamp"]);
        assert_eq!(frame["tool"], json!(tool));
        assert_eq!(frame["args"], args);
        let stamp = frame["timestamp"].as_u64().expect("timestamp in ms");
        assert!((before..=after).contains(&stamp), "{stamp} not in the run");
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

#[tokio::test]
async fn locals_result_starts_undefined_and_is_mutable() {
    let p = Project::new();
    let trace = Trace::default();
    let observer = {
        let trace = trace.clone();
        native(&mw_yaml("m"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push(format!(
                    "start: {:?} {:?} {}",
                    target.result(),
                    target.get("locals.result")?,
                    target.to_json()["locals"].get("result").is_some()
                ));
                target.next().await?;
                target.set("locals.result", json!("changed"))?;
                Ok(None)
            }
        })
    };
    let body = native(&skill_yaml("t", &["m"]), |_ctx, _args| async move {
        Ok(Some(json!("original")))
    });
    let kernel = p.builder().native(observer).native(body).build();
    let out = kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    assert_eq!(trace.take(), ["start: None None false"]);
    assert_eq!(plain(out), Some(json!("changed")));
}

#[tokio::test]
async fn locals_error_captures_the_exception_and_is_mutable() {
    let p = Project::new();
    let seen = Seen::default();
    let body = {
        let seen = seen.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("t", &ctx);
                // A plain error, not `fail`: the orchestrator captures it.
                Err(SkillError::failed("boom"))
            }
        })
    };
    let kernel = p.builder().native(body).build();
    let err = kernel.invoke("t", json!({}), no_opts()).await.unwrap_err();
    assert_eq!(err.message(), "boom");

    let t = seen.get("t");
    assert_eq!(
        t.error().map(|e| e.message().to_string()),
        Some("boom".into())
    );
    assert_eq!(get(&t, "locals.error.message"), Some(json!("boom")));
    t.set("locals.error", json!({"message": "replaced"}))
        .unwrap();
    assert_eq!(
        t.error().map(|e| e.message().to_string()),
        Some("replaced".into())
    );
    t.set("locals.error", Value::Null).unwrap();
    assert!(t.error().is_none());
}

#[tokio::test]
async fn locals_config_starts_with_cwd_library_runtime() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p.builder().native(recorder("t", &[], &seen)).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let t = seen.get("t");
    let config = get(&t, "locals.config").expect("locals.config");
    let globals = get(&t, "globals.config").expect("globals.config");
    assert_eq!(config["cwd"], json!(p.path().display().to_string()));
    for key in ["cwd", "library", "runtime"] {
        assert!(!config[key].is_null(), "locals.config.{key} is set");
        assert_eq!(
            config[key], globals[key],
            "locals.config.{key} comes from globals"
        );
    }

    // Taken from globals when the invocation starts, not from a copy made at startup.
    t.set("globals.config.cwd", json!("/elsewhere")).unwrap();
    t.set("globals.config.library", json!("lib-2")).unwrap();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();
    let again = get(&seen.get("t"), "locals.config").expect("locals.config");
    assert_eq!(again["cwd"], json!("/elsewhere"));
    assert_eq!(again["library"], json!("lib-2"));
}

#[tokio::test]
async fn locals_config_is_per_invocation() {
    let p = Project::new();
    let seen = Seen::default();
    let parent = {
        let seen = seen.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("t", &ctx);
                ctx.set("locals.config.model", json!("parent-model"))?;
                ctx.invoke("c", json!({}), no_opts()).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let child = {
        let seen = seen.clone();
        native(&skill_yaml("c", &[]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("c", &ctx);
                ctx.set("locals.config.workspace", json!("child-ws"))?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(parent).native(child).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, c) = (seen.get("t"), seen.get("c"));
    assert_eq!(get(&t, "locals.config.model"), Some(json!("parent-model")));
    assert_eq!(get(&t, "locals.config.workspace"), None);
    assert_eq!(get(&c, "locals.config.model"), None);
    assert_eq!(get(&c, "locals.config.workspace"), Some(json!("child-ws")));
}

#[tokio::test]
async fn config_middleware_populates_locals_config() {
    let p = Project::new();
    std::fs::create_dir_all(p.path().join("sub")).unwrap();
    // `cwd` and `paths` are the config middleware of this kernel; their metadata values say
    // what to put in `locals.config`.
    let with_cwd = native(
        "name: with-cwd\nmetadata:\n  cwd: sub\n",
        |ctx, _args| async move { ctx.get("locals.config.cwd") },
    );
    let with_paths = native(
        "name: with-paths\nmetadata:\n  paths: [skills, more-skills]\n",
        |ctx, _args| async move { ctx.get("locals.config.paths") },
    );
    let kernel = p.builder().native(with_cwd).native(with_paths).build();
    let out = kernel
        .invoke("with-cwd", json!({}), no_opts())
        .await
        .unwrap();
    assert_eq!(
        plain(out),
        Some(json!(p.path().join("sub").display().to_string()))
    );
    let out = kernel
        .invoke("with-paths", json!({}), no_opts())
        .await
        .unwrap();
    assert_eq!(plain(out), Some(json!(["skills", "more-skills"])));
}

#[tokio::test]
async fn globals_are_shared_across_invocations() {
    let p = Project::new();
    let trace = Trace::default();
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &[]), move |ctx, args| {
            let trace = trace.clone();
            async move {
                let globals = ctx.get("globals")?.expect("globals");
                let keys: Vec<&String> = globals.as_object().expect("object").keys().collect();
                trace.push(format!("keys: {keys:?}"));
                trace.push(format!("seen: {:?}", ctx.get("globals.cache.counter")?));
                ctx.set("globals.cache.counter", args["n"].clone())?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(body).build();
    kernel
        .invoke("t", json!({"n": 1}), no_opts())
        .await
        .unwrap();
    kernel
        .invoke("t", json!({"n": 2}), no_opts())
        .await
        .unwrap();

    let lines = trace.take();
    assert_eq!(lines[1], "seen: None");
    assert_eq!(lines[3], "seen: Some(Number(1))", "{lines:?}");
    for keys in [&lines[0], &lines[2]] {
        for key in ["config", "tools", "cache"] {
            assert!(keys.contains(&format!("\"{key}\"")), "{keys}");
        }
    }
}

#[tokio::test]
async fn locals_are_a_per_invocation_scratchpad() {
    let p = Project::new();
    let trace = Trace::default();
    let writer = {
        let trace = trace.clone();
        native(&mw_yaml("m1"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push(format!("m1 sees {:?}", target.get("locals.note")?));
                target.set("locals.note", json!("from-m1"))?;
                target.next().await?;
                Ok(None)
            }
        })
    };
    let reader = {
        let trace = trace.clone();
        native(&mw_yaml("m2"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push(format!("m2 sees {:?}", target.get("locals.note")?));
                target.next().await?;
                Ok(None)
            }
        })
    };
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &["m1", "m2"]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                trace.push(format!("t sees {:?}", ctx.get("locals.note")?));
                ctx.invoke("c", json!({}), no_opts()).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let child = {
        let trace = trace.clone();
        native(&skill_yaml("c", &[]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                trace.push(format!("c sees {:?}", ctx.get("locals.note")?));
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(writer)
        .native(reader)
        .native(body)
        .native(child)
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let note = "Some(String(\"from-m1\"))";
    let run = [
        "m1 sees None".to_string(),
        format!("m2 sees {note}"),
        format!("t sees {note}"),
        "c sees None".to_string(),
    ];
    let expected: Vec<String> = run.iter().chain(run.iter()).cloned().collect();
    assert_eq!(trace.take(), expected);
}

#[tokio::test]
async fn nonlocals_are_shallow_copied_parent_to_child() {
    let p = Project::new();
    let seen = Seen::default();
    let parent = {
        let seen = seen.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("t", &ctx);
                ctx.set("nonlocals.shared", json!("parent"))?;
                ctx.set("nonlocals.kept", json!({"a": 1}))?;
                ctx.invoke("c", json!({}), no_opts()).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let child = {
        let seen = seen.clone();
        native(&skill_yaml("c", &["m"]), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("c", &ctx);
                let inherited = ctx.get("nonlocals")?.expect("nonlocals");
                ctx.set("locals.inherited", inherited)?;
                ctx.set("nonlocals.shared", json!("child"))?;
                ctx.set("nonlocals.own", json!(1))?;
                ctx.invoke("g", json!({}), no_opts()).await?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(parent)
        .native(child)
        .native(recorder("g", &[], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, c, g, m) = (seen.get("t"), seen.get("c"), seen.get("g"), seen.get("m"));
    // The child saw the parent's values...
    assert_eq!(get(&c, "locals.inherited.shared"), Some(json!("parent")));
    assert_eq!(get(&c, "locals.inherited.kept"), Some(json!({"a": 1})));
    // ...and so did the middleware of the child (a chain entry is an invoke too).
    assert_eq!(get(&m, "nonlocals.shared"), Some(json!("parent")));
    // The child's overrides are its own and its children's, never the parent's.
    assert_eq!(get(&c, "nonlocals.shared"), Some(json!("child")));
    assert_eq!(get(&g, "nonlocals.shared"), Some(json!("child")));
    assert_eq!(get(&g, "nonlocals.own"), Some(json!(1)));
    assert_eq!(get(&g, "nonlocals.kept"), Some(json!({"a": 1})));
    assert_eq!(get(&t, "nonlocals.shared"), Some(json!("parent")));
    assert_eq!(get(&t, "nonlocals.own"), None);
}

#[tokio::test]
async fn root_context_id_is_the_first_contexts_id() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(caller("t", &["m"], "c", &seen))
        .native(caller("c", &[], "g", &seen))
        .native(recorder("g", &[], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();
    kernel.invoke("g", json!({}), no_opts()).await.unwrap();

    let root = seen.get("t");
    for ctx in [&root, &seen.get("c"), &seen.all("g")[0], &seen.get("m")] {
        assert_eq!(get(ctx, "nonlocals.rootContextId"), Some(json!(root.id())));
        assert_eq!(ctx.root_id(), root.id());
    }
    let second = seen.all("g").pop().expect("second run");
    assert_ne!(second.id(), root.id());
    assert_eq!(
        get(&second, "nonlocals.rootContextId"),
        Some(json!(second.id()))
    );
}

// ---------------------------------------------------------------------------------------------
// Properties: run
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn run_origin_uri_and_frontmatter() {
    let p = Project::new();
    p.skill(
        "x.skill.md",
        "---\nname: x\ndescription: Says x.\nmetadata:\n  m: true\n  color: blue\n---\nx",
    );
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(spy("m", &seen))
        .native(recorder("nat", &[], &seen))
        .build();
    kernel.invoke("x", json!({}), no_opts()).await.unwrap();
    kernel.invoke("nat", json!({}), no_opts()).await.unwrap();

    let x = seen.get("m").target();
    let file = std::path::absolute(p.path().join("skills/x.skill.md")).unwrap();
    assert_eq!(
        get(&x, "run.origin.uri"),
        Some(json!(format!("file://{}", file.display())))
    );
    assert!(
        get(&x, "run.origin.uri")
            .unwrap()
            .as_str()
            .unwrap()
            .starts_with("file:///")
    );
    let fm = get(&x, "run.origin.frontmatter").expect("frontmatter");
    assert_eq!(fm["name"], json!("x"));
    assert_eq!(fm["description"], json!("Says x."));
    assert_eq!(fm["metadata"], json!({"m": true, "color": "blue"}));
    // Builtins (native tools) have no uri.
    let n = seen.get("nat");
    assert_eq!(get(&n, "run.origin.uri"), Some(Value::Null));
    assert_eq!(get(&n, "run.origin.frontmatter.name"), Some(json!("nat")));
}

#[tokio::test]
async fn run_middleware_is_the_resolved_cascade() {
    let p = Project::new();
    p.skill(
        "x.skill.md",
        "---\nname: x\nmetadata:\n  m: { a: 1 }\n  color: blue\n  size: 3\n---\nx",
    );
    let seen = Seen::default();
    let mut overrides = Map::new();
    overrides.insert("color".into(), json!("red"));
    let kernel = p
        .builder()
        .native(spy("m", &seen))
        .overrides(overrides)
        .build();
    kernel.invoke("x", json!({}), no_opts()).await.unwrap();

    let x = seen.get("m").target();
    let meta = get(&x, "run.middleware").expect("run.middleware");
    assert_eq!(meta["m"], json!({"a": 1}), "the skill's own keys");
    assert_eq!(meta["size"], json!(3));
    assert_eq!(meta["color"], json!("red"), "command-line overrides win");
    assert_eq!(
        meta["execute"],
        json!(true),
        "inherited from default-pipeline"
    );
    assert_eq!(meta["validate-args"], json!(true));
    // It is the merged result, not the raw frontmatter.
    assert_ne!(
        Some(meta),
        get(&x, "run.origin.frontmatter.metadata"),
        "run.middleware differs from the tool's own metadata"
    );
}

#[tokio::test]
async fn locals_prompt_has_raw_and_expanded() {
    let p = Project::new();
    p.skill(
        "greet.skill.md",
        "---\nname: greet\nmetadata:\n  m: true\n---\nHi :arg[who]!",
    );
    let trace = Trace::default();
    let observer = {
        let trace = trace.clone();
        native(&mw_yaml("m"), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let target = ctx.ctx_target()?;
                trace.push(target.get("locals.prompt")?.unwrap_or_default().to_string());
                target.next().await?;
                trace.push(target.get("locals.prompt")?.unwrap_or_default().to_string());
                Ok(None)
            }
        })
    };
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(observer)
        .native(recorder("nat", &[], &seen))
        .build();
    let out = kernel
        .invoke("greet", json!({"who": "Ada"}), no_opts())
        .await
        .unwrap();

    assert_eq!(plain(out), Some(json!("Hi Ada!")));
    assert_eq!(
        trace.take(),
        [
            json!({"raw": "Hi :arg[who]!", "expanded": "Hi :arg[who]!"}).to_string(),
            json!({"raw": "Hi :arg[who]!", "expanded": "Hi Ada!"}).to_string(),
        ]
    );
    // Only markdown tools have a prompt.
    kernel.invoke("nat", json!({}), no_opts()).await.unwrap();
    assert_eq!(get(&seen.get("nat"), "locals.prompt"), None);
}

#[tokio::test]
async fn run_tool_is_the_tool_declaration() {
    let p = Project::new();
    p.skill(
        "x.skill.md",
        concat!(
            "---\nname: x\ndescription: Does x.\nmetadata:\n  m: true\n",
            "  params: { type: object }\n  returns: { type: string }\n",
            "  visibility: hidden\n  allowed-tools: [c]\n  tags: [alpha, beta]\n  color: blue\n",
            "---\nx",
        ),
    );
    let seen = Seen::default();
    let kernel = p.builder().native(spy("m", &seen)).build();
    kernel.invoke("x", json!({}), no_opts()).await.unwrap();

    let tool = get(&seen.get("m").target(), "run.tool").expect("run.tool");
    let keys: Vec<&str> = tool
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "allowedTools",
            "description",
            "name",
            "params",
            "returns",
            "role",
            "tags",
            "visibility"
        ]
    );
    assert_eq!(tool["name"], json!("x"));
    assert_eq!(tool["description"], json!("Does x."));
    assert_eq!(tool["params"], json!({"type": "object"}));
    assert_eq!(tool["returns"], json!({"type": "string"}));
    assert_eq!(tool["visibility"], json!("hidden"));
    assert_eq!(tool["allowedTools"], json!(["c"]));
    assert_eq!(tool["tags"], json!(["alpha", "beta"]));
}

#[tokio::test]
async fn run_tool_is_closed() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p.builder().native(recorder("t", &[], &seen)).build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let t = seen.get("t");
    let before = get(&t, "run.tool").expect("run.tool");
    assert!(t.set("run.tool.color", json!("blue")).is_err());
    let mut widened = before.clone();
    widened["color"] = json!("blue");
    assert!(t.set("run.tool", widened).is_err());
    assert_eq!(
        get(&t, "run.tool"),
        Some(before.clone()),
        "nothing was added"
    );
    // Declared keys stay mutable.
    t.set("run.tool.description", json!("changed")).unwrap();
    assert_eq!(get(&t, "run.tool.description"), Some(json!("changed")));
    assert_eq!(
        get(&t, "run.tool").unwrap().as_object().unwrap().len(),
        before.as_object().unwrap().len()
    );
}

#[tokio::test]
async fn run_signal_is_aborted_by_abort() {
    let p = Project::new();
    let trace = Trace::default();
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let signal = ctx.signal();
                trace.push(format!(
                    "before: {} {:?} {}",
                    signal.is_cancelled(),
                    ctx.aborted(),
                    ctx.get("run.signal")?.unwrap_or_default()
                ));
                trace.push(format!(
                    "write refused: {}",
                    immutable(ctx.set("run.signal", json!({"aborted": true})))
                ));
                ctx.abort(Some("stop"));
                trace.push(format!(
                    "after: {} {:?} {}",
                    signal.is_cancelled(),
                    ctx.aborted(),
                    ctx.get("run.signal")?.unwrap_or_default()
                ));
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(body).build();
    let _ = kernel.invoke("t", json!({}), no_opts()).await;

    assert_eq!(
        trace.take(),
        [
            r#"before: false None {"aborted":false}"#,
            "write refused: true",
            r#"after: true Some("stop") {"aborted":true,"reason":"stop"}"#,
        ]
    );
}

#[tokio::test]
async fn abort_cascades_to_children() {
    let p = Project::new();
    let trace = Trace::default();
    let started: Shared<oneshot::Sender<()>> = shared();
    let root = {
        let started = started.clone();
        let trace = trace.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let (started, trace) = (started.clone(), trace.clone());
            async move {
                let (tx, rx) = oneshot::channel();
                *started.lock() = Some(tx);
                let child = ctx.invoke("c", json!({}), no_opts());
                let aborter = async {
                    rx.await.expect("grandchild started");
                    ctx.abort(Some("parent stop"));
                };
                let _ = futures::join!(child, aborter);
                trace.push(format!("t: {:?}", ctx.aborted()));
                Ok(Some(json!("done")))
            }
        })
    };
    let child = {
        let trace = trace.clone();
        native(&skill_yaml("c", &[]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let _ = ctx.invoke("g", json!({}), no_opts()).await;
                trace.push(format!("c: {:?}", ctx.aborted()));
                Ok(Some(json!("done")))
            }
        })
    };
    let grandchild = {
        let (started, trace) = (started.clone(), trace.clone());
        native(&skill_yaml("g", &[]), move |ctx, _args| {
            let (started, trace) = (started.clone(), trace.clone());
            async move {
                let tx = started.lock().take().expect("sender");
                tx.send(()).expect("root waits");
                ctx.cancelled().await;
                trace.push(format!("g: {:?}", ctx.aborted()));
                Ok(Some(json!("done")))
            }
        })
    };
    // Aborting a child leaves its parent alone.
    let self_aborting = native(&skill_yaml("s", &[]), |ctx, _args| async move {
        ctx.abort(Some("own"));
        Ok(Some(json!("done")))
    });
    let parent_of_aborted = {
        let trace = trace.clone();
        native(&skill_yaml("p", &[]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let _ = ctx.invoke("s", json!({}), no_opts()).await;
                trace.push(format!("p: {:?}", ctx.aborted()));
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p
        .builder()
        .native(root)
        .native(child)
        .native(grandchild)
        .native(self_aborting)
        .native(parent_of_aborted)
        .build();
    let run = kernel.invoke("t", json!({}), no_opts());
    let _ = tokio::time::timeout(HANG_GUARD, run)
        .await
        .expect("the abort never reached the grandchild");
    kernel.invoke("p", json!({}), no_opts()).await.unwrap();

    assert_eq!(
        trace.take(),
        [
            r#"g: Some("parent stop")"#,
            r#"c: Some("parent stop")"#,
            r#"t: Some("parent stop")"#,
            "p: None",
        ]
    );
}

#[tokio::test]
async fn seed_signal_is_composed_into_run_signal() {
    let p = Project::new();
    let trace = Trace::default();
    let started: Shared<oneshot::Sender<()>> = shared();
    let body = {
        let (started, trace) = (started.clone(), trace.clone());
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let (started, trace) = (started.clone(), trace.clone());
            async move {
                trace.push("body ran");
                if let Some(tx) = started.lock().take() {
                    let _ = tx.send(());
                }
                ctx.cancelled().await;
                trace.push(format!("t: {:?}", ctx.aborted().is_some()));
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(body).build();

    // A seed signal aborted later aborts the context.
    let token = CancellationToken::new();
    let (tx, rx) = oneshot::channel();
    *started.lock() = Some(tx);
    let mut options = InvokeOptions::default();
    options.context.signal = Some(token.clone());
    let run = async {
        futures::join!(kernel.invoke("t", json!({}), options), async {
            rx.await.expect("body started");
            token.cancel();
        })
    };
    let _ = tokio::time::timeout(HANG_GUARD, run)
        .await
        .expect("cancelling the seed signal never reached the context");
    assert_eq!(trace.take(), ["body ran", "t: true"]);

    // A seed signal aborted already makes the run's signal aborted from the start.
    let token = CancellationToken::new();
    token.cancel();
    let mut options = InvokeOptions::default();
    options.context.signal = Some(token);
    let out = tokio::time::timeout(HANG_GUARD, kernel.invoke("t", json!({}), options))
        .await
        .expect("an aborted seed signal left the context running");
    assert_eq!(out.map_err(|e| e.kind()).err(), Some(ErrorKind::Aborted));
    assert!(trace.take().is_empty(), "the body never starts");
}

#[tokio::test]
async fn interactive_is_only_true_for_a_terminal_root() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(caller("t", &["m"], "c", &seen))
        .native(recorder("c", &[], &seen))
        .native(spy("m", &seen))
        .build();
    kernel
        .invoke_interactive("t", json!({}), no_opts())
        .await
        .unwrap();

    let (t, c, m) = (seen.get("t"), seen.get("c"), seen.get("m"));
    assert!(t.interactive());
    assert_eq!(get(&t, "run.interactive"), Some(json!(true)));
    assert!(immutable(t.set("run.interactive", json!(false))));
    assert!(t.interactive());
    for child in [&c, &m] {
        assert!(
            !child.interactive(),
            "{} does not inherit",
            child.tool_name()
        );
        assert_eq!(get(child, "run.interactive"), Some(json!(false)));
    }
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();
    assert!(!seen.get("t").interactive(), "not a terminal session");
}

// ---------------------------------------------------------------------------------------------
// Manager
// ---------------------------------------------------------------------------------------------

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
                let inline = native("name: inline\n", move |ctx, args| {
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
                let unregistered = ctx.invoke("inline", json!({"x": 1}), no_opts()).await;
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

#[tokio::test]
async fn get_and_set_by_dotted_path() {
    let p = Project::new();
    let trace = Trace::default();
    let writer = native(&mw_yaml("m"), |ctx, _args| async move {
        let target = ctx.ctx_target()?;
        target.set("locals.from-m.note", json!("hi"))?;
        target.next().await?;
        Ok(None)
    });
    let body = {
        let trace = trace.clone();
        native(&skill_yaml("t", &["m"]), move |ctx, _args| {
            let trace = trace.clone();
            async move {
                let show = |path: &str| -> skillgate::Result<()> {
                    trace.push(format!(
                        "{path} = {}",
                        ctx.get(path)?.unwrap_or(json!("<none>"))
                    ));
                    Ok(())
                };
                show("args.who")?;
                show("args.items.1.x")?;
                show("locals.from-m")?;
                show("run.tool.name")?;
                show("locals.missing.deep")?;
                ctx.set("locals.a.b.c", json!(1))?;
                show("locals.a")?;
                show("locals.a.b.c")?;
                ctx.set("locals.list", json!([1, 2]))?;
                ctx.set("locals.list.2", json!(3))?;
                show("locals.list")?;
                ctx.set("nonlocals.gateway.port", json!(8080))?;
                show("nonlocals.gateway")?;
                ctx.set("globals.cache.k", json!("v"))?;
                show("globals.cache.k")?;
                ctx.set("locals.config.model", json!("m-1"))?;
                show("locals.config.model")?;
                show("envelope.hasOtherTarget")?;
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(writer).native(body).build();
    kernel
        .invoke(
            "t",
            json!({"who": "Ada", "items": [1, {"x": 2}]}),
            no_opts(),
        )
        .await
        .unwrap();

    assert_eq!(
        trace.take(),
        [
            r#"args.who = "Ada""#,
            "args.items.1.x = 2",
            r#"locals.from-m = {"note":"hi"}"#,
            r#"run.tool.name = "t""#,
            r#"locals.missing.deep = "<none>""#,
            r#"locals.a = {"b":{"c":1}}"#,
            "locals.a.b.c = 1",
            "locals.list = [1,2,3]",
            r#"nonlocals.gateway = {"port":8080}"#,
            r#"globals.cache.k = "v""#,
            r#"locals.config.model = "m-1""#,
            "envelope.hasOtherTarget = false",
        ]
    );
}

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

#[tokio::test]
async fn ctx_target_throws_when_not_middleware() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p
        .builder()
        .native(recorder("t", &["m"], &seen))
        .native(spy("m", &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, m) = (seen.get("t"), seen.get("m"));
    assert!(t.ctx_target().is_err(), "t's target is itself");
    assert!(m.ctx_target().is_ok_and(|x| x.same(&t)));
}

#[tokio::test]
async fn middleware_own_context_is_a_private_workspace() {
    let p = Project::new();
    let seen = Seen::default();
    let mw = {
        let seen = seen.clone();
        native(&mw_yaml("m"), move |ctx, _args| {
            let seen = seen.clone();
            async move {
                seen.put("m", &ctx);
                let target = ctx.ctx_target()?;
                ctx.set("locals.scratch", json!("private"))?;
                target.set("locals.shared", json!("public"))?;
                target.next().await?;
                Ok(None)
            }
        })
    };
    let kernel = p
        .builder()
        .native(mw)
        .native(recorder("t", &["m"], &seen))
        .build();
    kernel.invoke("t", json!({}), no_opts()).await.unwrap();

    let (t, m) = (seen.get("t"), seen.get("m"));
    assert_eq!(get(&t, "locals.shared"), Some(json!("public")));
    assert_eq!(get(&t, "locals.scratch"), None);
    assert_eq!(get(&m, "locals.scratch"), Some(json!("private")));
    assert_eq!(get(&m, "locals.shared"), None);
}

// ---------------------------------------------------------------------------------------------
// Serialization
// ---------------------------------------------------------------------------------------------

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
