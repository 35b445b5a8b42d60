//! Spec 02, Execution Flow and Return Values: the call stack is the onion, what a return does
//! to the result, `next()` after the end and on an empty chain; and the full pipeline on every
//! invocation.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use skillgate::skills::tool::Tool;
use skillgate::{Context, ErrorKind, InvokeOptions, Kernel};

use super::{out_of, run_named, run_s};
use crate::support::common::{Project, Trace, chain_of, native, passing, plain, skill};

/// A middleware `outer` that calls `next()` `times` times, recording what each call resolved to.
fn outer(trace: &Trace, times: usize) -> Tool {
    let t = trace.clone();
    native(
        "name: outer\nmetadata:\n  role: middleware\n",
        move |ctx, _args| {
            let t = t.clone();
            async move {
                let target = ctx.ctx_target()?;
                for i in 0..times {
                    let out = target.next().await?;
                    let shown = out.map_or_else(|| "undefined".to_string(), |v| v.to_string());
                    t.push(format!("outer next#{i}={shown}"));
                }
                Ok(None)
            }
        },
    )
}

/// A middleware `inner` running `f` on the served context instead of passing.
fn inner<F>(f: F) -> Tool
where
    F: Fn(Context) -> skillgate::Result<Option<Value>> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    native(
        "name: inner\nmetadata:\n  role: middleware\n",
        move |ctx, _args| {
            let f = f.clone();
            async move { f(ctx.ctx_target()?) }
        },
    )
}

fn flow_kernel(trace: &Trace, outer_calls: usize, inner_tool: Tool) -> Kernel {
    let p = Project::new();
    p.builder()
        .native(outer(trace, outer_calls))
        .native(inner_tool)
        .native(passing("later", trace))
        .native(skill(
            "s",
            "  outer: true\n  inner: true\n  later: true\n",
            trace,
        ))
        .build()
}

#[tokio::test]
async fn the_call_stack_is_the_onion() {
    let p = Project::new();
    let trace = Trace::default();
    let onion = |name: &'static str, trace: &Trace| {
        let t = trace.clone();
        native(
            &format!("name: {name}\nmetadata:\n  role: middleware\n"),
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    t.push(format!("{name} before"));
                    target.next().await?;
                    t.push(format!("{name} after"));
                    Ok(None)
                }
            },
        )
    };
    let kernel = p
        .builder()
        .native(onion("one", &trace))
        .native(onion("two", &trace))
        .native(skill("s", "  one: true\n  two: true\n", &trace))
        .build();
    run_s(&kernel).await;
    assert_eq!(
        trace.take(),
        ["one before", "two before", "s", "two after", "one after"]
    );
}

#[tokio::test]
async fn returning_a_value_sets_the_result_and_finishes_the_chain() {
    let trace = Trace::default();
    let kernel = flow_kernel(&trace, 2, inner(|_| Ok(Some(json!("stopped")))));
    let out = run_named(&kernel, "s").await;
    assert_eq!(out_of(out), json!("stopped"));
    // The second `next()` finds the chain finished: `later` and the body never run.
    assert_eq!(
        trace.take(),
        [r#"outer next#0="stopped""#, r#"outer next#1="stopped""#]
    );
}

#[tokio::test]
async fn returning_undefined_does_not_clobber_the_result() {
    let trace = Trace::default();
    let kernel = flow_kernel(
        &trace,
        1,
        inner(|target| {
            target.set("locals.result", json!("set by inner"))?;
            Ok(None)
        }),
    );
    let out = run_named(&kernel, "s").await;
    assert_eq!(out_of(out), json!("set by inner"));
    assert_eq!(trace.take(), [r#"outer next#0="set by inner""#]);
}

#[tokio::test]
async fn a_middleware_that_does_not_call_next_ends_the_descent() {
    let trace = Trace::default();
    let kernel = flow_kernel(&trace, 1, inner(|_| Ok(None)));
    let out = run_named(&kernel, "s").await.unwrap();
    assert_eq!(plain(out), None);
    assert_eq!(trace.take(), ["outer next#0=undefined"]);
}

#[tokio::test]
async fn finish_sets_the_result_and_stops_the_chain() {
    let trace = Trace::default();
    let kernel = flow_kernel(
        &trace,
        2,
        inner(|target| {
            target.finish(json!("finished"));
            Ok(None)
        }),
    );
    let out = run_named(&kernel, "s").await;
    assert_eq!(out_of(out), json!("finished"));
    assert_eq!(
        trace.take(),
        [r#"outer next#0="finished""#, r#"outer next#1="finished""#]
    );
}

#[tokio::test]
async fn next_resolves_to_the_served_result_so_middleware_can_transform_it() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(native(
            "name: shout\nmetadata:\n  role: middleware\n",
            |ctx, _args| async move {
                let target = ctx.ctx_target()?;
                let out = target.next().await?;
                assert_eq!(out, target.result());
                let text = out.and_then(|v| v.as_str().map(str::to_uppercase));
                Ok(text.map(Value::String))
            },
        ))
        .native(skill("s", "  shout: true\n", &trace))
        .build();
    assert_eq!(out_of(run_named(&kernel, "s").await), json!("S DONE"));
    assert_eq!(trace.take(), ["s"]);
}

#[tokio::test]
async fn next_after_the_chain_finished_returns_the_result_immediately() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(outer(&trace, 3))
        .native(skill("s", "  outer: true\n", &trace))
        .build();
    assert_eq!(out_of(run_named(&kernel, "s").await), json!("s done"));
    assert_eq!(
        trace.take(),
        [
            "s",
            r#"outer next#0="s done""#,
            r#"outer next#1="s done""#,
            r#"outer next#2="s done""#
        ]
    );
}

#[tokio::test]
async fn next_on_an_empty_chain_resolves_immediately() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p.builder().native(skill("s", "", &trace)).build();
    // Every entry of the chain removed: only the phase sentinels are left, and they never run.
    let mut remove = Map::new();
    for name in chain_of(&kernel, "s") {
        remove.insert(name, json!({"remove": true}));
    }
    assert!(remove.contains_key("execute"));
    let mut options = InvokeOptions::default();
    options
        .context
        .locals
        .insert("middleware".into(), Value::Object(remove));
    options
        .context
        .locals
        .insert("result".into(), json!("seeded"));
    let out = kernel.invoke("s", json!({}), options).await;
    assert_eq!(out_of(out), json!("seeded"));
    assert!(trace.take().is_empty());
}

#[tokio::test]
async fn every_invocation_runs_the_full_pipeline() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("mark", &trace))
        .native(skill(
            "typed",
            "  mark: true\n  params:\n    type: object\n    properties:\n      n: { type: integer }\n",
            &trace,
        ))
        .native(native("name: runner\n", |ctx, args| async move {
            let out = ctx
                .invoke("typed", (*args).clone(), InvokeOptions::default())
                .await?;
            Ok(out.map(|v| (*v).clone()))
        }))
        .build();
    for _ in 0..2 {
        run_named(&kernel, "typed").await.unwrap();
    }
    assert_eq!(trace.take(), ["mark", "typed", "mark", "typed"]);
    // A nested invocation is validated like a root one.
    let err = kernel
        .invoke("runner", json!({"n": "x"}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs);
    assert_eq!(err.tool(), Some("typed"));
}

/// The entries of `name`'s resolved chain that the orchestrator steps over.
fn idle_of(kernel: &Kernel, name: &str) -> Vec<String> {
    let index = kernel.registry().current();
    let tool = index.find(name).expect("tool exists").clone();
    let resolved = skillgate::cascade::resolved_for(&index, &tool).expect("pipeline resolves");
    let mut idle: Vec<String> = resolved
        .entries
        .iter()
        .filter(|e| e.idle)
        .map(|e| e.name.to_string())
        .collect();
    idle.sort();
    idle
}

#[tokio::test]
async fn built_in_middleware_with_nothing_to_do_are_stepped_over_unless_hooks_watch_every_entry() {
    let p = Project::new();
    let trace = Trace::default();
    let spy = native(
        "name: spy\nmetadata:\n  role: middleware\n  $hook: { $self: $next }\n",
        |ctx, _args| async move {
            ctx.ctx_target()?.next().await?;
            Ok(None)
        },
    );
    let kernel = p
        .builder()
        .native(spy)
        .native(skill("bare", "  tags: [t]\n", &trace))
        .native(skill(
            "typed",
            "  params: { type: object }\n  returns: { type: integer }\n  allowed-tools: [bare]\n",
            &trace,
        ))
        .native(skill("watched", "  spy: true\n", &trace))
        .build();
    // Nothing to validate, no policy, no model: four entries have nothing to do.
    assert_eq!(
        idle_of(&kernel, "bare"),
        [
            "agent-execute",
            "validate-allowed-tools",
            "validate-args",
            "validate-returns"
        ]
    );
    // Each schema and the policy makes its middleware run.
    assert_eq!(idle_of(&kernel, "typed"), ["agent-execute"]);
    // A `$next` hook sees every entry: none is stepped over.
    assert!(idle_of(&kernel, "watched").is_empty());
    // Stepped over or not, the pipeline does what it did: `typed` still checks its returns.
    let err = kernel
        .invoke("typed", json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidReturns);
    let out = kernel
        .invoke("bare", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(plain(out), Some(json!("bare done")));
}
