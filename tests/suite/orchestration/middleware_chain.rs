//! Spec 02, The Middleware Chain: entries run through the orchestrator, explicit `fn` entries,
//! sorting and phase sentinels, extra middleware (override, remove, append), locals and
//! nonlocals middleware.

use std::sync::Arc;

use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use skillgate::cascade::{self, Entry, EntryFn, EntryKind};
use skillgate::{Context, InvokeOptions, Kernel};

use super::{get, out_of, probe};
use crate::support::common::{
    Project, Trace, chain_of, native, passing, skill, with_args, with_target,
};

#[tokio::test]
async fn a_chain_entry_runs_through_the_orchestrator_in_its_own_context_serving_the_caller() {
    let p = Project::new();
    let seen: Arc<Mutex<Option<Value>>> = Arc::default();
    let keep = seen.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: mw\nmetadata:\n  role: middleware\n",
            move |ctx, _args| {
                let keep = keep.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    *keep.lock() = Some(json!({
                        "id": ctx.id(),
                        "tool": ctx.tool_name(),
                        "target": target.id(),
                        "parent": ctx.parent().map(Context::id),
                        // Its own pipeline: the default pipeline's metadata is resolved for it.
                        "ownExecute": get(&ctx, "run.middleware.execute")?,
                        "ownHistory": get(&ctx, "locals.history")?.as_array().map(Vec::len),
                    }));
                    target.next().await?;
                    Ok(None)
                }
            },
        ))
        .native(probe("name: s\nmetadata:\n  mw: true\n", |ctx| {
            Ok(json!(ctx.id()))
        }))
        .build();
    let served = out_of(
        kernel
            .invoke("s", json!({}), InvokeOptions::default())
            .await,
    );
    let seen = seen.lock().clone().expect("mw ran");
    assert_ne!(seen["id"], served);
    assert_eq!(seen["tool"], json!("mw"));
    assert_eq!(seen["target"], served);
    assert_eq!(seen["parent"], served);
    assert_eq!(seen["ownExecute"], json!(true));
    assert_eq!(seen["ownHistory"], json!(2));
}

#[tokio::test]
async fn a_chain_entry_is_a_name_resolved_when_next_reaches_it() {
    let p = Project::new();
    // `paths` runs first and changes the served skill's search paths; `probe` is then found
    // through the new paths, not the ones the chain was built with.
    p.skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  paths: [alt, skills]\n  probe: true\n  $order:\n    paths: { after: [$pre-configure], before: [$configure] }\n---\nS",
    )
    .skill("probe.skill.md", "---\nname: probe\n---\nfrom skills")
    .write("alt/probe.skill.md", "---\nname: probe\n---\nfrom alt");
    let out = p
        .kernel()
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!("from alt"));
}

#[tokio::test]
async fn a_markdown_tool_used_as_middleware_gets_its_directives_expanded() {
    let p = Project::new();
    p.skill(
        "greeter.skill.md",
        "---\nname: greeter\n---\nHi :arg[who], from greeter",
    );
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(skill("s", "  greeter: { who: Ada }\n", &trace))
        .build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    // The middleware's result (its expanded prompt) becomes the served result.
    assert_eq!(out_of(out), json!("Hi Ada, from greeter"));
    assert!(trace.take().is_empty(), "the served body must not run");
}

#[tokio::test]
async fn a_markdown_tool_used_as_middleware_gets_its_agent_run() {
    let p = Project::new();
    p.skill(
        "asker.skill.md",
        "---\nname: asker\nmetadata:\n  model: fake\n---\nAsk :arg[who]",
    );
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native("name: agent\n", move |_ctx, args| {
            let t = t.clone();
            async move {
                t.push(format!(
                    "agent prompt={} config={}",
                    args["prompt"], args["config"]
                ));
                Ok(Some(json!("the agent's answer")))
            }
        }))
        .native(skill("s", "  asker: { who: Ada }\n", &trace))
        .build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!("the agent's answer"));
    assert_eq!(trace.take(), [r#"agent prompt="Ask Ada" config="fake""#]);
}

#[tokio::test]
async fn entries_with_an_explicit_fn_are_called_directly() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: inj\nmetadata:\n  role: middleware\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    let t2 = t.clone();
                    let f: EntryFn = Arc::new(move |c: Context| {
                        let t2 = t2.clone();
                        async move {
                            t2.push(format!("fn ctx={}", c.id()));
                            c.next().await?;
                            Ok(None)
                        }
                        .boxed()
                    });
                    // No tool is named `direct`: going through the orchestrator would fail.
                    target.inject(vec![Entry {
                        kind: EntryKind::Fn(f),
                        ..Entry::tool("direct", Arc::new(Value::Null))
                    }])?;
                    target.next().await?;
                    Ok(None)
                }
            },
        ))
        .native(probe("name: s\nmetadata:\n  inj: true\n", |ctx| {
            Ok(json!(ctx.id()))
        }))
        .build();
    let served = out_of(
        kernel
            .invoke("s", json!({}), InvokeOptions::default())
            .await,
    );
    assert_eq!(
        trace.take(),
        [format!("fn ctx={}", served.as_str().unwrap())]
    );
}

#[tokio::test]
async fn phase_sentinels_order_entries_and_never_run() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("a", &trace))
        .native(passing("b", &trace))
        .native(passing("c", &trace))
        .native(skill(
            "s",
            "  a: true\n  b: true\n  c: true\n  $order:\n    a: { after: [$pre-execute], before: [$execute] }\n    c: { after: [$pre-configure], before: [$configure] }\n",
            &trace,
        ))
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["c", "b", "a", "s"]);
    assert!(chain_of(&kernel, "s").iter().all(|n| !n.starts_with('$')));
}

#[tokio::test]
async fn entries_without_order_sit_after_configure_and_before_post_configure() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("px", &trace))
        .native(passing("py", &trace))
        .native(passing("pz", &trace))
        .native(skill(
            "s",
            "  px: true\n  py: true\n  pz: true\n  $order:\n    px: { after: [$post-configure], before: [$pre-execute] }\n    pz: { after: [$pre-configure], before: [$configure] }\n",
            &trace,
        ))
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["pz", "py", "px", "s"]);
    let index = kernel.registry().current();
    let tool = index.find("s").unwrap().clone();
    let resolved = cascade::resolved_for(&index, &tool).unwrap();
    let py = resolved.entries.iter().find(|e| &*e.name == "py").unwrap();
    assert_eq!(&*py.after, [Arc::<str>::from("$configure")]);
    assert_eq!(&*py.before, [Arc::<str>::from("$post-configure")]);
}

#[tokio::test]
async fn sorting_is_topological_and_stable_with_insertion_order_breaking_ties() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("zed", &trace))
        .native(passing("alpha", &trace))
        .native(passing("mid", &trace))
        .native(skill(
            "s",
            "  zed: true\n  alpha: true\n  mid: true\n  $order:\n    mid: { after: [$configure], before: [alpha] }\n",
            &trace,
        ))
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["zed", "mid", "alpha", "s"]);
}

#[tokio::test]
async fn extra_middleware_with_a_cascade_name_overrides_it_keeping_its_ordering() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(passing("first", &trace))
        .native(skill(
            "s",
            "  mark: cascade\n  first: true\n  $order:\n    mark: { after: [$post-configure], before: [$pre-execute] }\n",
            &trace,
        ))
        .build();
    let mut options = InvokeOptions::default();
    options
        .context
        .locals
        .insert("middleware".into(), json!({"mark": {"args": "seed"}}));
    kernel.invoke("s", json!({}), options).await.unwrap();
    // Without the original's constraints `mark` would run before `first`.
    assert_eq!(trace.take(), ["first", r#"mark="seed""#, "s"]);
}

#[tokio::test]
async fn extra_middleware_with_remove_true_suppresses_the_cascade_entry() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("mark", &trace))
        .native(passing("other", &trace))
        .native(skill("s", "  mark: true\n  other: true\n", &trace))
        .build();
    let mut options = InvokeOptions::default();
    options
        .context
        .locals
        .insert("middleware".into(), json!({"mark": {"remove": true}}));
    kernel.invoke("s", json!({}), options).await.unwrap();
    assert_eq!(trace.take(), ["other", "s"]);
}

#[tokio::test]
async fn extra_middleware_with_a_new_name_is_appended_and_serializable_through_dollar_context() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(passing("first", &trace))
        .native(skill("s", "  first: true\n", &trace))
        .build();
    let args = json!({"$context": {"middleware": {"mark": {"args": "appended"}}}});
    kernel
        .invoke("s", args, InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["first", r#"mark="appended""#, "s"]);
}

/// `parent` invokes `child`; `mark` records which tool it serves.
fn parent_child(trace: &Trace) -> Kernel {
    let p = Project::new();
    let t = trace.clone();
    p.builder()
        .native(with_target("mark", trace))
        .native(skill("child", "", trace))
        .native(native("name: parent\n", move |ctx, _args| {
            let t = t.clone();
            async move {
                t.push("parent");
                ctx.invoke("child", json!({}), InvokeOptions::default())
                    .await?;
                Ok(None)
            }
        }))
        .build()
}

#[tokio::test]
async fn locals_middleware_applies_to_this_invocation_only() {
    let trace = Trace::default();
    let kernel = parent_child(&trace);
    let mut options = InvokeOptions::default();
    options
        .context
        .locals
        .insert("middleware".into(), json!({"mark": {}}));
    kernel.invoke("parent", json!({}), options).await.unwrap();
    assert_eq!(trace.take(), ["mark@parent", "parent", "child"]);
}

#[tokio::test]
async fn nonlocals_middleware_applies_to_the_invocation_and_everything_below_it() {
    let trace = Trace::default();
    let kernel = parent_child(&trace);
    let mut options = InvokeOptions::default();
    options
        .context
        .nonlocals
        .insert("middleware".into(), json!({"mark": {}}));
    kernel.invoke("parent", json!({}), options).await.unwrap();
    let seen = trace.take();
    let pos = |s: &str| {
        seen.iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("{s} missing: {seen:?}"))
    };
    assert!(pos("mark@parent") < pos("parent"), "{seen:?}");
    assert!(pos("parent") < pos("mark@child"), "{seen:?}");
    assert!(pos("mark@child") < pos("child"), "{seen:?}");
}
