//! Spec 01, Properties: `args` (set-once), `locals` (history, result, error, config, the
//! per-invocation scratchpad), `globals` and `nonlocals` (with `rootContextId`).

use serde_json::{Value, json};
use skillgate::{Context, SkillError};

use super::{caller, get, immutable, mw_yaml, no_opts, recorder, skill_yaml, spy};
use crate::support::common::{Project, Seen, Trace, native, plain};

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

#[tokio::test]
async fn a_roots_seeded_nonlocals_follow_its_root_context_id_which_the_seed_cannot_replace() {
    let p = Project::new();
    let seen = Seen::default();
    let kernel = p.builder().native(recorder("g", &[], &seen)).build();
    let mut options = no_opts();
    for (key, value) in [
        ("request", json!({ "id": "r-1" })),
        ("rootContextId", json!("forged")),
        ("gateway", json!({ "name": "http" })),
    ] {
        options.context.nonlocals.insert(key.into(), value);
    }
    kernel.invoke("g", json!({}), options).await.unwrap();

    let ctx = seen.get("g");
    let Some(Value::Object(nonlocals)) = get(&ctx, "nonlocals") else {
        panic!("nonlocals is an object");
    };
    assert_eq!(
        nonlocals.keys().map(String::as_str).collect::<Vec<_>>(),
        ["rootContextId", "request", "gateway"],
        "the kernel's id first, then the seed's keys in their order"
    );
    assert_eq!(nonlocals["rootContextId"], json!(ctx.id()));
    assert_eq!(nonlocals["request"], json!({ "id": "r-1" }));
    assert_eq!(nonlocals["gateway"], json!({ "name": "http" }));
}
