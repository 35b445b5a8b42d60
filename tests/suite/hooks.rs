//! Spec 03, Hooks: `$hook` bindings on `$next` and `$invoke`, their propagation through the
//! cascade, and the built-in `debug`, `profile` and `observe` hooks. One test per rule.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use skillgate::skills::tool::Tool;
use skillgate::{InvokeOptions, Kernel, SkillError, cascade};

use crate::support::common::{Project, Trace, chain_of, native, passing, plain, skill, with_args};

/// A hook `name` declared with `$hook: <binding>` that records `enter <entry|pipeline> <args>
/// served=<tool>`, calls `target.next()`, then records `exit <entry|pipeline>`.
fn hook(name: &str, binding: &str, trace: &Trace) -> Tool {
    let t = trace.clone();
    native(
        &format!("name: {name}\nmetadata:\n  role: middleware\n  $hook: {binding}\n"),
        move |ctx, args| {
            let t = t.clone();
            async move {
                let target = ctx.ctx_target()?;
                let entry = ctx
                    .get("locals.hook.entry")?
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| "pipeline".into());
                t.push(format!(
                    "enter {entry} {args} served={}",
                    target.tool_name()
                ));
                target.next().await?;
                t.push(format!("exit {entry}"));
                Ok(None)
            }
        },
    )
}

/// `runner` invokes `args.run` (a list of skill names) in turn, with `nonlocals.debug = false`
/// when `args.quiet` is true, and returns the run's log events tagged `args.tag`.
fn runner() -> Tool {
    native("name: runner\n", |ctx, args| async move {
        let mut options = InvokeOptions::default();
        if args["quiet"] == json!(true) {
            options
                .context
                .nonlocals
                .insert("debug".into(), json!(false));
        }
        for name in args["run"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap_or_default().to_string();
            ctx.invoke(name, json!({}), options.clone()).await?;
        }
        Ok(Some(Value::Array(
            ctx.tail(&json!({"tag": args["tag"].clone()})),
        )))
    })
}

async fn events(kernel: &Kernel, run: &[&str], tag: &str, quiet: bool) -> Vec<Value> {
    let out = kernel
        .invoke(
            "runner",
            json!({"run": run, "tag": tag, "quiet": quiet}),
            InvokeOptions::default(),
        )
        .await
        .expect("run succeeds");
    match plain(out) {
        Some(Value::Array(events)) => events,
        other => panic!("runner returned {other:?}"),
    }
}

fn field<'a>(events: &'a [Value], key: &str) -> Vec<&'a str> {
    events
        .iter()
        .map(|e| e[key].as_str().unwrap_or("-"))
        .collect()
}

fn skills_in(events: &[Value]) -> BTreeSet<&str> {
    field(events, "skill").into_iter().collect()
}

#[tokio::test]
async fn a_self_next_hook_used_as_a_metadata_key_wraps_each_chain_entry_with_its_args() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(hook("spy", "{ $self: $next }", &trace))
        .native(passing("mark", &trace))
        .native(skill("s", "  spy: true\n  mark: { v: 1 }\n", &trace))
        .build();
    let chain = chain_of(&kernel, "s");
    // The hook is separated from the chain.
    assert!(!chain.contains(&"spy".to_string()), "{chain:?}");
    kernel
        .invoke("s", json!({"top": 1}), InvokeOptions::default())
        .await
        .unwrap();
    let seen = trace.take();
    let entered: Vec<String> = seen
        .iter()
        .filter_map(|s| s.strip_prefix("enter "))
        .map(|s| s.split(' ').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(entered, chain, "every chain entry is wrapped, in order");
    let pos = |s: &str| seen.iter().position(|x| x == s).unwrap_or(usize::MAX);
    let enter_mark = pos(r#"enter mark {"v":1} served=s"#);
    assert!(enter_mark < pos("mark"), "{seen:?}");
    assert!(pos("mark") < pos("exit mark"), "{seen:?}");
    assert!(pos("s") < pos("exit execute"), "{seen:?}");
    assert!(
        seen.contains(&"enter execute true served=s".to_string()),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_self_invoke_hook_wraps_the_whole_pipeline_with_the_tool_args() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(hook("around", "{ $self: $invoke }", &trace))
        .native(passing("mark", &trace))
        .native(skill("s", "  around: true\n  mark: true\n", &trace))
        .build();
    assert!(!chain_of(&kernel, "s").contains(&"around".to_string()));
    kernel
        .invoke("s", json!({"a": 1}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(
        trace.take(),
        [
            r#"enter pipeline {"a":1} served=s"#,
            "mark",
            "s",
            "exit pipeline"
        ]
    );
}

#[tokio::test]
async fn a_hook_annotation_in_a_skills_metadata_binds_a_named_tool_to_a_trigger() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        // A plain middleware: no `$hook` of its own, and not a metadata key of `s`.
        .native(with_args("plain-hook", &trace))
        .native(passing("mark", &trace))
        .native(skill(
            "s",
            "  $hook: { plain-hook: $invoke }\n  mark: true\n",
            &trace,
        ))
        .build();
    kernel
        .invoke("s", json!({"a": 1}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), [r#"plain-hook={"a":1}"#, "mark", "s"]);
}

#[tokio::test]
async fn hooks_are_off_by_default() {
    let p = Project::new();
    p.skill("s.skill.md", "---\nname: s\n---\nS");
    let kernel = p.builder().native(runner()).build();
    let index = kernel.registry().current();
    let tool = index.find("s").unwrap().clone();
    let resolved = cascade::resolved_for(&index, &tool).unwrap();
    assert!(resolved.invoke_hooks.is_empty());
    assert!(resolved.next_hooks.is_empty());
    assert_eq!(
        events(&kernel, &["s"], "debug", false).await,
        Vec::<Value>::new()
    );
}

#[tokio::test]
async fn debug_emits_pipeline_and_next_enter_and_exit_events() {
    let p = Project::new();
    p.skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  debug: true\n---\nS",
    );
    let kernel = p.builder().native(runner()).build();
    // `debug` declares `$hook: { $self: ... }`: it binds as a hook, not as a chain entry.
    assert!(!chain_of(&kernel, "s").contains(&"debug".to_string()));
    let events = events(&kernel, &["s"], "debug", false).await;
    let kinds = field(&events, "type");
    assert_eq!(kinds.first(), Some(&"pipeline-enter"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"pipeline-exit"), "{kinds:?}");
    assert_eq!(skills_in(&events), BTreeSet::from(["s"]));
    let at = |kind: &str, entry: &str| {
        events
            .iter()
            .position(|e| e["type"] == json!(kind) && e["entry"] == json!(entry))
            .unwrap_or_else(|| panic!("no {kind} for {entry}: {events:?}"))
    };
    for entry in chain_of(&kernel, "s") {
        assert!(at("next-enter", &entry) < at("next-exit", &entry));
    }
    // Entries nest: the outer entry exits after the inner one.
    assert!(at("next-enter", "validate-args") < at("next-enter", "execute"));
    assert!(at("next-exit", "execute") < at("next-exit", "validate-args"));
    let exit = events.last().unwrap();
    assert_eq!(exit["result"], json!("S"));
}

#[tokio::test]
async fn debug_break_emits_breakpoint_hit_for_the_named_entry() {
    let p = Project::new();
    p.skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  debug: { break: [execute] }\n---\nS",
    );
    let kernel = p.builder().native(runner()).build();
    let events = events(&kernel, &["s"], "debug", false).await;
    let hits: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == json!("breakpoint-hit"))
        .collect();
    assert_eq!(hits.len(), 1, "{events:?}");
    assert_eq!(hits[0]["entry"], json!("execute"));
    assert_eq!(hits[0]["skill"], json!("s"));
}

#[tokio::test]
async fn hooks_propagate_through_the_authority() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  debug: true\n---\nThe project.",
    )
    .skill("s.skill.md", "---\nname: s\n---\nS")
    .skill("t.skill.md", "---\nname: t\n---\nT");
    let kernel = p.builder().native(runner()).build();
    let events = events(&kernel, &["s", "t"], "debug", false).await;
    // Every project skill is instrumented; the native runner outside the project is not.
    assert_eq!(skills_in(&events), BTreeSet::from(["s", "t"]));
    assert!(field(&events, "type").contains(&"pipeline-enter"));
}

#[tokio::test]
async fn hooks_propagate_through_the_inherit_chain() {
    let p = Project::new();
    p.skill(
        "base.skill.md",
        "---\nname: base\nmetadata:\n  debug: true\n---\nB",
    )
    .skill(
        "kid.skill.md",
        "---\nname: kid\nmetadata:\n  $inherit: base\n---\nK",
    );
    let kernel = p.builder().native(runner()).build();
    let events = events(&kernel, &["kid"], "debug", false).await;
    assert_eq!(skills_in(&events), BTreeSet::from(["kid"]));
}

#[tokio::test]
async fn nonlocals_debug_false_suppresses_instrumentation_for_the_subtree() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  debug: true\n---\nThe project.",
    )
    .skill("s.skill.md", "---\nname: s\n---\nS calls :skill[t]")
    .skill("t.skill.md", "---\nname: t\n---\nT");
    let kernel = p.builder().native(runner()).build();
    let loud = events(&kernel, &["s"], "debug", false).await;
    assert_eq!(skills_in(&loud), BTreeSet::from(["s", "t"]));
    let quiet = events(&kernel, &["s"], "debug", true).await;
    assert_eq!(quiet, Vec::<Value>::new());
}

#[tokio::test]
async fn hooks_are_per_context() {
    let p = Project::new();
    p.skill(
        "loud.skill.md",
        "---\nname: loud\nmetadata:\n  debug: true\n---\nLoud calls :skill[plain]",
    )
    .skill("plain.skill.md", "---\nname: plain\n---\nPlain");
    let kernel = p.builder().native(runner()).build();
    let events = events(&kernel, &["loud", "plain"], "debug", false).await;
    // `plain` runs inside `loud` and on its own, and is instrumented neither time.
    assert_eq!(skills_in(&events), BTreeSet::from(["loud"]));
    assert!(!events.is_empty());
}

#[tokio::test]
async fn profile_fills_locals_profile_with_entry_and_total_timings() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        // Bound inside `profile` (after it): sees the entries once the chain has unwound.
        .native(native(
            "name: peek\nmetadata:\n  role: middleware\n  $hook: { $self: $invoke }\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    target.next().await?;
                    let profile = target.get("locals.profile")?.unwrap_or(Value::Null);
                    t.push(profile.to_string());
                    Ok(None)
                }
            },
        ))
        .native(native(
            "name: s\nmetadata:\n  profile: true\n  peek: true\n",
            |ctx, _args| async move { Ok(Some(json!(ctx.root_id()))) },
        ))
        .build();
    let root = plain(
        kernel
            .invoke("s", json!({}), InvokeOptions::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let seen = trace.take();
    assert_eq!(seen.len(), 1);
    let profile: Value = serde_json::from_str(&seen[0]).unwrap();
    let entries = profile["entries"].as_array().expect("entries");
    let names: BTreeSet<&str> = entries.iter().filter_map(|e| e["name"].as_str()).collect();
    let chain = chain_of(&kernel, "s");
    assert!(!chain.contains(&"profile".to_string()), "{chain:?}");
    assert_eq!(names, chain.iter().map(String::as_str).collect());
    assert!(entries.iter().all(|e| e["ms"].is_number()), "{profile}");
    // The pipeline total lands when the `$invoke` hook exits, and is logged with the profile.
    let logged = kernel
        .logs()
        .tail(root.as_str().unwrap(), &json!({"tag": "profile"}));
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0]["profile"]["totalMs"].is_number(), "{logged:?}");
    assert_eq!(
        logged[0]["profile"]["entries"].as_array().map(Vec::len),
        Some(entries.len())
    );
}

/// `sink` records the args it is invoked with.
fn sink(trace: &Trace) -> Tool {
    let t = trace.clone();
    native("name: sink\n", move |_ctx, args| {
        let t = t.clone();
        async move {
            t.push(args.to_string());
            Ok(None)
        }
    })
}

fn observed(trace: &Trace) -> Vec<Value> {
    trace
        .take()
        .iter()
        .map(|s| serde_json::from_str(s).unwrap_or(json!(s)))
        .collect()
}

#[tokio::test]
async fn observe_invokes_its_ref_on_enter_and_exit_with_tool_args_result_and_context_id() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(sink(&trace))
        .native(native(
            "name: s\nmetadata:\n  observe: { ref: sink }\n",
            |ctx, args| async move { Ok(Some(json!({"echo": args["q"], "id": ctx.id()}))) },
        ))
        .build();
    let out = plain(
        kernel
            .invoke("s", json!({"q": 1}), InvokeOptions::default())
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(!chain_of(&kernel, "s").contains(&"observe".to_string()));
    let calls = observed(&trace);
    assert_eq!(calls.len(), 2, "{calls:?}");
    let id = &out["id"];
    for (call, phase) in calls.iter().zip(["enter", "exit"]) {
        assert_eq!(call["phase"], json!(phase), "{calls:?}");
        assert_eq!(call["tool"], json!("s"));
        assert_eq!(call["args"], json!({"q": 1}));
        assert_eq!(&call["contextId"], id);
    }
    assert_eq!(calls[1]["result"], out);
}

#[tokio::test]
async fn observe_with_a_topic_emits_enter_and_exit_as_events_on_it() {
    use skillgate::events::KernelBus;
    let p = Project::new();
    let kernel = p
        .builder()
        .native(native(
            "name: s\nmetadata:\n  observe: { topic: audit }\n",
            |_ctx, args| async move { Ok(Some(json!({"echo": args["q"]}))) },
        ))
        .build();
    let bus = kernel.bus().clone();
    bus.subscribe_queue("audit", "q", false).await.unwrap();
    kernel
        .invoke("s", json!({"q": 3}), InvokeOptions::default())
        .await
        .unwrap();
    let events = bus
        .wait("audit", "q", std::time::Duration::from_secs(30), 10, true)
        .await
        .unwrap();
    let data: Vec<Value> = events
        .iter()
        .map(|d| d.event.data.clone().unwrap_or(Value::Null))
        .collect();
    assert_eq!(data.len(), 2, "{data:?}");
    for (event, phase) in data.iter().zip(["enter", "exit"]) {
        assert_eq!(event["phase"], json!(phase), "{data:?}");
        assert_eq!(event["tool"], json!("s"));
        assert_eq!(event["args"], json!({"q": 3}));
        assert!(event["contextId"].is_string());
    }
    assert_eq!(data[1]["result"], json!({"echo": 3}));
    assert!(events.iter().all(|d| d.event.topic == "audit"));
}

#[tokio::test]
async fn observe_reports_the_error_phase_when_the_pipeline_fails() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(sink(&trace))
        .native(native(
            "name: s\nmetadata:\n  observe: { ref: sink }\n",
            |_ctx, _args| async move { Err(SkillError::failed("boom")) },
        ))
        .build();
    let err = kernel
        .invoke("s", json!({"q": 2}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.message(), "boom");
    let calls = observed(&trace);
    let phases: Vec<&Value> = calls.iter().map(|c| &c["phase"]).collect();
    assert_eq!(phases, [&json!("enter"), &json!("error")], "{calls:?}");
    assert_eq!(calls[1]["tool"], json!("s"));
    assert_eq!(calls[1]["args"], json!({"q": 2}));
    assert!(calls[1]["contextId"].is_string());
    assert_eq!(calls[1]["error"]["message"], json!("boom"));
}
