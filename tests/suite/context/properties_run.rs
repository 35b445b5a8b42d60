//! Spec 01, Properties: `run` (origin, middleware, tool, signal, interactive) and
//! `locals.prompt`; `manager.abort()` is checked here through `run.signal`.

use serde_json::{Map, Value, json};
use skillgate::{ErrorKind, InvokeOptions};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{
    HANG_GUARD, Shared, caller, get, immutable, mw_yaml, no_opts, recorder, shared, skill_yaml, spy,
};
use crate::support::common::{Project, Seen, Trace, native, plain};

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

#[tokio::test]
async fn a_seed_signal_is_watched_by_the_run_itself_without_a_task_of_its_own() {
    let p = Project::new();
    let tasks: Shared<usize> = shared();
    let body = {
        let tasks = tasks.clone();
        native(&skill_yaml("t", &[]), move |_ctx, _args| {
            let tasks = tasks.clone();
            async move {
                let alive = tokio::runtime::Handle::current()
                    .metrics()
                    .num_alive_tasks();
                *tasks.lock() = Some(alive);
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(body).build();
    let mut options = InvokeOptions::default();
    options.context.signal = Some(CancellationToken::new());
    let out = kernel.invoke("t", json!({}), options).await.unwrap();
    assert_eq!(out.as_deref(), Some(&json!("done")));
    // The test's own future is not a task: any task alive was spawned by the invocation.
    assert_eq!(
        tasks.lock().take(),
        Some(0),
        "tasks alive while the run lasted"
    );
}

#[tokio::test]
async fn a_run_dropped_after_its_seed_signal_was_cancelled_aborts_its_context() {
    let p = Project::new();
    let held: Shared<skillgate::Context> = shared();
    let started: Shared<oneshot::Sender<()>> = shared();
    let body = {
        let (held, started) = (held.clone(), started.clone());
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let (held, started) = (held.clone(), started.clone());
            async move {
                *held.lock() = Some(ctx.clone());
                if let Some(tx) = started.lock().take() {
                    let _ = tx.send(());
                }
                std::future::pending::<()>().await;
                Ok(None)
            }
        })
    };
    let kernel = p.builder().native(body).build();
    let (tx, rx) = oneshot::channel();
    *started.lock() = Some(tx);
    let token = CancellationToken::new();
    let mut options = InvokeOptions::default();
    options.context.signal = Some(token.clone());
    let mut run = Box::pin(kernel.invoke("t", json!({}), options));
    tokio::select! {
        _ = &mut run => panic!("the body never ends"),
        started = rx => started.expect("body started"),
    }
    let ctx = held.lock().take().expect("the body kept its context");
    assert_eq!(ctx.aborted(), None);
    // The caller stops waiting as it cancels: the run is dropped without being polled again.
    token.cancel();
    drop(run);
    assert_eq!(
        ctx.aborted().as_deref(),
        Some("aborted by the caller's signal"),
        "what the run left behind is told at once"
    );
}

#[tokio::test]
async fn a_run_that_finished_is_no_longer_linked_to_its_seed_signal() {
    let p = Project::new();
    let held: Shared<skillgate::Context> = shared();
    let body = {
        let held = held.clone();
        native(&skill_yaml("t", &[]), move |ctx, _args| {
            let held = held.clone();
            async move {
                *held.lock() = Some(ctx.clone());
                Ok(Some(json!("done")))
            }
        })
    };
    let kernel = p.builder().native(body).build();
    let token = CancellationToken::new();
    let mut options = InvokeOptions::default();
    options.context.signal = Some(token.clone());
    let out = kernel.invoke("t", json!({}), options).await.unwrap();
    assert_eq!(out.as_deref(), Some(&json!("done")));
    // The door cancels its signal once it has answered; work the run left behind goes on.
    token.cancel();
    tokio::task::yield_now().await;
    let ctx = held.lock().take().expect("the body kept its context");
    assert_eq!(ctx.aborted(), None);
}
