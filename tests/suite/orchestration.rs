//! Spec 02, the orchestration model: one test per normative rule of invocation, the cascade,
//! the middleware chain, return values and error handling.
//!
//! Native test tools record what ran in a [`Trace`]; chains are also checked directly through
//! `cascade::resolved_for` / `cascade::merged` where the rule is about the resolved pipeline.

use std::sync::Arc;

use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use skillgate::cascade::{self, Entry, EntryFn, EntryKind};
use skillgate::skills::tool::Tool;
use skillgate::{Context, ErrorKind, InvokeOptions, Kernel, SkillError};

use crate::common::{Project, Trace, native, plain};

// ---------------------------------------------------------------------------------------------
// Helpers shared with `hooks.rs`.
// ---------------------------------------------------------------------------------------------

/// A middleware `name` with extra metadata lines `meta` (indented two spaces) that records
/// `record(name, target tool, args)` and passes to the next entry.
pub(crate) fn middleware(
    name: &str,
    meta: &str,
    trace: &Trace,
    record: fn(&str, &str, &Value) -> String,
) -> Tool {
    let (t, label) = (trace.clone(), name.to_string());
    native(
        &format!("name: {name}\nmetadata:\n  role: middleware\n{meta}"),
        move |ctx, args| {
            let (t, label) = (t.clone(), label.clone());
            async move {
                let target = ctx.ctx_target()?;
                t.push(record(&label, target.tool_name(), &args));
                target.next().await?;
                Ok(None)
            }
        },
    )
}

/// A middleware that records its name and passes.
pub(crate) fn passing(name: &str, trace: &Trace) -> Tool {
    middleware(name, "", trace, |name, _, _| name.to_string())
}

/// A middleware that records `name=<args as JSON>` and passes.
pub(crate) fn with_args(name: &str, trace: &Trace) -> Tool {
    middleware(name, "", trace, |name, _, args| format!("{name}={args}"))
}

/// A middleware that records `name@<served tool>` and passes.
pub(crate) fn with_target(name: &str, trace: &Trace) -> Tool {
    middleware(name, "", trace, |name, target, _| {
        format!("{name}@{target}")
    })
}

/// A native skill `name` with metadata lines `meta` whose body records `name` and returns
/// `"<name> done"`.
pub(crate) fn skill(name: &str, meta: &str, trace: &Trace) -> Tool {
    let (t, label) = (trace.clone(), name.to_string());
    native(
        &format!("name: {name}\nmetadata:\n{meta}"),
        move |_ctx, _args| {
            let (t, label) = (t.clone(), label.clone());
            async move {
                t.push(label.clone());
                Ok(Some(json!(format!("{label} done"))))
            }
        },
    )
}

/// The chain of `name` as resolved for invocation: tool entries by name, the skill's own body
/// as `<body>`, sentinels left out.
pub(crate) fn chain_of(kernel: &Kernel, name: &str) -> Vec<String> {
    let index = kernel.registry().current();
    let tool = index.find(name).expect("tool exists").clone();
    let resolved = cascade::resolved_for(&index, &tool).expect("pipeline resolves");
    resolved
        .entries
        .iter()
        .filter_map(|e| match e.kind {
            EntryKind::Tool => Some(e.name.to_string()),
            EntryKind::Body => Some("<body>".to_string()),
            _ => None,
        })
        .collect()
}

/// The merged cascade metadata of `name`.
pub(crate) fn merged_of(kernel: &Kernel, name: &str) -> Map<String, Value> {
    let index = kernel.registry().current();
    cascade::merged(&index, name)
        .expect("cascade resolves")
        .metadata
        .clone()
}

/// An entry with ordering constraints.
fn entry(name: &str, after: &[&str], before: &[&str]) -> Entry {
    Entry {
        after: after.iter().map(|s| Arc::from(*s)).collect(),
        before: before.iter().map(|s| Arc::from(*s)).collect(),
        ..Entry::tool(name, Arc::new(Value::Null))
    }
}

/// A middleware `inj` that records `inj`, injects `make()` into the served chain and passes.
fn injector(trace: &Trace, make: fn() -> Vec<Entry>) -> Tool {
    let t = trace.clone();
    native(
        "name: inj\nmetadata:\n  role: middleware\n",
        move |ctx, _args| {
            let t = t.clone();
            async move {
                let target = ctx.ctx_target()?;
                t.push("inj");
                target.inject(make())?;
                target.next().await?;
                Ok(None)
            }
        },
    )
}

/// A native skill whose body returns the JSON that `f` computes from its context.
fn probe<F>(yaml: &str, f: F) -> Tool
where
    F: Fn(&Context) -> skillgate::Result<Value> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    native(yaml, move |ctx, _args| {
        let f = f.clone();
        async move { f(&ctx).map(Some) }
    })
}

fn get(ctx: &Context, path: &str) -> skillgate::Result<Value> {
    Ok(ctx.get(path)?.unwrap_or(Value::Null))
}

fn out_of(result: skillgate::Result<Option<Arc<Value>>>) -> Value {
    plain(result.expect("invocation succeeds")).unwrap_or(Value::Null)
}

// ---------------------------------------------------------------------------------------------
// Invocation step 1: `$NAME` extraction.
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Invocation step 2: resolving the ref.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_earlier_search_path_shadows_a_later_one() {
    let p = Project::new();
    p.write("first/same.skill.md", "---\nname: same\n---\nfrom first")
        .write("second/same.skill.md", "---\nname: same\n---\nfrom second")
        .write(
            "second/only.skill.md",
            "---\nname: only\n---\nonly in second",
        )
        .skill("hello.skill.md", "---\nname: hello\n---\nproject hello");
    let kernel = p
        .builder()
        .skill_dirs(vec![
            p.path().join("first"),
            p.path().join("second"),
            p.path().join("skills"),
        ])
        .build();
    let run = |name: &'static str| kernel.invoke(name, json!({}), InvokeOptions::default());
    assert_eq!(out_of(run("same").await), json!("from first"));
    assert_eq!(out_of(run("only").await), json!("only in second"));
    // The project's skills come before the bundled ones.
    assert_eq!(out_of(run("hello").await), json!("project hello"));
}

#[tokio::test]
async fn an_unknown_ref_is_not_found_and_suggests_close_names() {
    let p = Project::new();
    let err = p
        .kernel()
        .invoke("helo", json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.message().contains("`hello`"), "{}", err.message());
    let suggestions = &err.data().expect("data")["suggestions"];
    assert!(
        suggestions
            .as_array()
            .is_some_and(|s| s.contains(&json!("hello"))),
        "{suggestions}"
    );
}

// ---------------------------------------------------------------------------------------------
// Invocation steps 3 to 5: child context, tool data, history.
// ---------------------------------------------------------------------------------------------

/// A runner that invokes `probe`, with itself as target when `as_target` is true.
fn runner_of_probe(as_target: bool) -> Tool {
    native("name: runner\n", move |ctx, _args| async move {
        let mut options = InvokeOptions::default();
        if as_target {
            options.context.target = Some(ctx.clone());
        }
        let out = ctx.invoke("probe", json!({}), options).await?;
        Ok(Some(json!({"runner": ctx.id(), "probe": out.as_deref()})))
    })
}

fn target_probe() -> Tool {
    probe("name: probe\n", |ctx| {
        Ok(json!({
            "id": ctx.id(),
            "target": ctx.target().id(),
            "hasOtherTarget": ctx.has_other_target(),
            "parent": ctx.parent().map(Context::id),
        }))
    })
}

#[tokio::test]
async fn a_child_context_targets_itself_by_default() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(runner_of_probe(false))
        .native(target_probe())
        .build();
    let out = out_of(
        kernel
            .invoke("runner", json!({}), InvokeOptions::default())
            .await,
    );
    let probe = &out["probe"];
    assert_eq!(probe["target"], probe["id"]);
    assert_eq!(probe["hasOtherTarget"], json!(false));
    assert_eq!(probe["parent"], out["runner"]);
    assert_ne!(probe["id"], out["runner"]);
}

#[tokio::test]
async fn the_target_comes_from_the_invoke_options() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(runner_of_probe(true))
        .native(target_probe())
        .build();
    let out = out_of(
        kernel
            .invoke("runner", json!({}), InvokeOptions::default())
            .await,
    );
    let probe = &out["probe"];
    assert_eq!(probe["target"], out["runner"]);
    assert_eq!(probe["hasOtherTarget"], json!(true));
    assert_ne!(probe["id"], out["runner"]);
}

#[tokio::test]
async fn the_context_seed_is_overlaid_on_the_new_context() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(probe("name: probe\n", |ctx| {
            Ok(json!({
                "local": get(ctx, "locals.seeded")?,
                "inherited": get(ctx, "nonlocals.mode")?,
                "untouched": get(ctx, "nonlocals.keep")?,
            }))
        }))
        .native(native("name: runner\n", |ctx, _args| async move {
            ctx.set("nonlocals.mode", json!("parent"))?;
            ctx.set("nonlocals.keep", json!("parent"))?;
            let mut options = InvokeOptions::default();
            options.context.locals.insert("seeded".into(), json!(1));
            options
                .context
                .nonlocals
                .insert("mode".into(), json!("seed"));
            let out = ctx.invoke("probe", json!({}), options).await?;
            Ok(out.map(|v| (*v).clone()))
        }))
        .build();
    let out = kernel
        .invoke("runner", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(
        out_of(out),
        json!({"local": 1, "inherited": "seed", "untouched": "parent"})
    );
}

#[tokio::test]
async fn origin_prompt_and_tool_declaration_come_from_the_tool_definition() {
    let p = Project::new();
    p.skill(
        "doc.skill.md",
        "---\nname: doc\ndescription: A documented skill.\nmetadata:\n  peek: true\n---\nBody text.\n",
    );
    let kernel = p
        .builder()
        .native(native(
            "name: peek\nmetadata:\n  role: middleware\n",
            |ctx, _args| async move {
                let target = ctx.ctx_target()?;
                Ok(Some(json!({
                    "uri": get(&target, "run.origin.uri")?,
                    "description": get(&target, "run.origin.frontmatter.description")?,
                    "raw": get(&target, "locals.prompt.raw")?,
                    "name": get(&target, "run.tool.name")?,
                    "declared": get(&target, "run.tool.description")?,
                })))
            },
        ))
        .build();
    let out = out_of(
        kernel
            .invoke("doc", json!({}), InvokeOptions::default())
            .await,
    );
    let file = p.path().join("skills/doc.skill.md");
    assert_eq!(out["uri"], json!(format!("file://{}", file.display())));
    assert_eq!(out["description"], json!("A documented skill."));
    assert_eq!(out["raw"].as_str().map(str::trim), Some("Body text."));
    assert_eq!(out["name"], json!("doc"));
    assert_eq!(out["declared"], json!("A documented skill."));
}

#[tokio::test]
async fn each_invocation_pushes_a_history_frame() {
    let p = Project::new();
    let kernel = p
        .builder()
        .native(probe("name: probe\n", |ctx| get(ctx, "locals.history")))
        .native(native("name: runner\n", |ctx, _args| async move {
            let out = ctx
                .invoke("probe", json!({"n": 1}), InvokeOptions::default())
                .await?;
            Ok(out.map(|v| (*v).clone()))
        }))
        .build();
    let history = out_of(
        kernel
            .invoke("runner", json!({"top": true}), InvokeOptions::default())
            .await,
    );
    let frames = history.as_array().expect("history is a list");
    let tools: Vec<&Value> = frames.iter().map(|f| &f["tool"]).collect();
    assert_eq!(tools, [&json!("runner"), &json!("probe")]);
    assert_eq!(frames[0]["args"], json!({"top": true}));
    assert_eq!(frames[1]["args"], json!({"n": 1}));
    assert!(frames.iter().all(|f| f["timestamp"].is_u64()), "{history}");
}

// ---------------------------------------------------------------------------------------------
// Invocation step 6: the authority.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_project_main_skill_governs_the_skills_under_skills() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  mark: from-main\n---\nThe project.",
    )
    .skill("s.skill.md", "---\nname: s\n---\nS body");
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(skill("loose", "", &trace))
        .build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!("S body"));
    assert_eq!(trace.take(), [r#"mark="from-main""#]);
    // A tool outside the project folder is not governed by it.
    kernel
        .invoke("loose", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["loose"]);
}

#[tokio::test]
async fn a_main_skill_file_without_role_main_is_not_an_authority() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  mark: from-main\n---\nNot a main skill.",
    )
    .skill("s.skill.md", "---\nname: s\n---\nS body");
    let trace = Trace::default();
    let kernel = p.builder().native(with_args("mark", &trace)).build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!("S body"));
    assert!(trace.take().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Invocation step 7: the cascade.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cascade_levels_apply_lowest_first_default_authority_inherit_own_overrides() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  validate-returns: false\n  a: authority\n  b: authority\n  c: authority\n  d: authority\n---\n",
    )
    .skill(
        "p.skill.md",
        "---\nname: p\nmetadata:\n  b: parent\n  c: parent\n  d: parent\n---\n",
    )
    .skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  $inherit: p\n  c: own\n  d: own\n---\n",
    );
    let mut overrides = Map::new();
    overrides.insert("d".into(), json!("cli"));
    let kernel = p.builder().overrides(overrides).build();
    let merged = merged_of(&kernel, "s");
    // The default pipeline is the lowest level; the authority overrides it.
    assert_eq!(merged["validate-args"], json!(true));
    assert_eq!(merged["validate-returns"], json!(false));
    assert_eq!(merged["a"], json!("authority"));
    assert_eq!(merged["b"], json!("parent"));
    assert_eq!(merged["c"], json!("own"));
    assert_eq!(merged["d"], json!("cli"));
    assert!(!chain_of(&kernel, "s").contains(&"validate-returns".to_string()));
}

#[tokio::test]
async fn private_keys_do_not_pass_to_other_skills() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  $private: [m-secret]\n  m-secret: 1\n  m-open: 1\n---\n",
    )
    .skill(
        "p.skill.md",
        "---\nname: p\nmetadata:\n  $private: [p-secret, mark]\n  p-secret: 1\n  p-open: 1\n  mark: parent-only\n---\nP",
    )
    .skill("s.skill.md", "---\nname: s\nmetadata:\n  $inherit: p\n---\nS");
    let trace = Trace::default();
    let kernel = p.builder().native(with_args("mark", &trace)).build();
    let s = merged_of(&kernel, "s");
    assert_eq!(s.get("m-open"), Some(&json!(1)));
    assert_eq!(s.get("p-open"), Some(&json!(1)));
    assert_eq!(s.get("m-secret"), None);
    assert_eq!(s.get("p-secret"), None);
    assert_eq!(s.get("mark"), None);
    // The declaring skill keeps its private keys.
    assert_eq!(merged_of(&kernel, "p").get("p-secret"), Some(&json!(1)));
    let run = |name: &'static str| kernel.invoke(name, json!({}), InvokeOptions::default());
    run("s").await.unwrap();
    assert!(trace.take().is_empty());
    run("p").await.unwrap();
    assert_eq!(trace.take(), [r#"mark="parent-only""#]);
}

#[tokio::test]
async fn inherit_as_a_string_names_one_parent_with_its_own_chain() {
    let p = Project::new();
    p.skill(
        "g.skill.md",
        "---\nname: g\nmetadata:\n  from-g: g\n  shared: g\n---\n",
    )
    .skill(
        "p.skill.md",
        "---\nname: p\nmetadata:\n  $inherit: g\n  from-p: p\n  shared: p\n---\n",
    )
    .skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  $inherit: p\n---\n",
    );
    let merged = merged_of(&p.kernel(), "s");
    assert_eq!(merged["from-g"], json!("g"));
    assert_eq!(merged["from-p"], json!("p"));
    assert_eq!(merged["shared"], json!("p"));
}

#[tokio::test]
async fn inherit_as_a_list_is_linearized_with_c3() {
    let p = Project::new();
    // Diamond: s -> [b, c], b -> a, c -> a. C3 gives s, b, c, a: `c` outranks `a` even though
    // a depth-first walk would visit `a` (through `b`) before `c`.
    p.skill(
        "a.skill.md",
        "---\nname: a\nmetadata:\n  k: a\n  j: a\n---\n",
    )
    .skill(
        "b.skill.md",
        "---\nname: b\nmetadata:\n  $inherit: a\n  k: b\n---\n",
    )
    .skill(
        "c.skill.md",
        "---\nname: c\nmetadata:\n  $inherit: a\n  k: c\n  j: c\n---\n",
    )
    .skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  $inherit: [b, c]\n---\n",
    );
    let merged = merged_of(&p.kernel(), "s");
    assert_eq!(merged["k"], json!("b"));
    assert_eq!(merged["j"], json!("c"));
}

#[tokio::test]
async fn inherit_false_drops_the_inherit_chain_and_the_default_pipeline() {
    let p = Project::new();
    p.skill("p.skill.md", "---\nname: p\nmetadata:\n  from-p: 1\n---\n")
        .skill(
            "alone.skill.md",
            "---\nname: alone\nmetadata:\n  $inherit: false\n  mine: 1\n---\nplain :arg[x]",
        )
        .skill("normal.skill.md", "---\nname: normal\n---\nnormal");
    let kernel = p.kernel();
    let merged = merged_of(&kernel, "alone");
    assert_eq!(merged.get("mine"), Some(&json!(1)));
    assert_eq!(merged.get("execute"), None);
    assert_eq!(merged.get("validate-args"), None);
    assert_eq!(chain_of(&kernel, "alone"), ["<body>"]);
    assert!(chain_of(&kernel, "normal").contains(&"execute".to_string()));
    // Without the `directives` middleware the body runs unexpanded.
    let out = kernel
        .invoke("alone", json!({"x": 1}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!("plain :arg[x]"));
}

#[tokio::test]
async fn command_line_overrides_are_the_top_cascade_level() {
    let p = Project::new();
    let trace = Trace::default();
    let mut overrides = Map::new();
    overrides.insert("mark".into(), json!("cli"));
    overrides.insert("gone".into(), json!(false));
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(passing("gone", &trace))
        .native(skill("s", "  mark: own\n  gone: true\n", &trace))
        .overrides(overrides)
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), [r#"mark="cli""#, "s"]);
}

fn merge_project(own: &str) -> Project {
    let p = Project::new();
    p.skill(
        "p.skill.md",
        "---\nname: p\nmetadata:\n  list: [p1, p2]\n  obj: { x: 1, y: { a: 1 } }\n---\n",
    )
    .skill(
        "s.skill.md",
        &format!("---\nname: s\nmetadata:\n  $inherit: p\n{own}---\n"),
    );
    p
}

#[tokio::test]
async fn merge_append_puts_own_items_after_inherited_ones() {
    let p = merge_project("  $merge: { list: append }\n  list: [s1]\n");
    assert_eq!(
        merged_of(&p.kernel(), "s")["list"],
        json!(["p1", "p2", "s1"])
    );
}

#[tokio::test]
async fn merge_prepend_puts_own_items_before_inherited_ones() {
    let p = merge_project("  $merge: { list: prepend }\n  list: [s1]\n");
    assert_eq!(
        merged_of(&p.kernel(), "s")["list"],
        json!(["s1", "p1", "p2"])
    );
}

#[tokio::test]
async fn merge_shallow_merges_objects_one_level_deep() {
    let p = merge_project("  $merge: { obj: shallow }\n  obj: { y: { b: 2 }, z: 3 }\n");
    assert_eq!(
        merged_of(&p.kernel(), "s")["obj"],
        json!({"x": 1, "y": {"b": 2}, "z": 3})
    );
}

#[tokio::test]
async fn without_a_merge_policy_a_higher_level_replaces_the_value() {
    let p = merge_project("  list: [s1]\n  obj: { z: 3 }\n");
    let merged = merged_of(&p.kernel(), "s");
    assert_eq!(merged["list"], json!(["s1"]));
    assert_eq!(merged["obj"], json!({"z": 3}));
}

#[tokio::test]
async fn remove_drops_keys_merged_so_far() {
    let p = Project::new();
    p.skill(
        "p.skill.md",
        "---\nname: p\nmetadata:\n  mark: inherited\n  data: 1\n  keep: 1\n---\nP",
    )
    .skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  $inherit: p\n  $remove: [mark, data]\n---\nS",
    );
    let trace = Trace::default();
    let kernel = p.builder().native(with_args("mark", &trace)).build();
    let merged = merged_of(&kernel, "s");
    assert_eq!(merged.get("mark"), None);
    assert_eq!(merged.get("data"), None);
    assert_eq!(merged.get("keep"), Some(&json!(1)));
    let run = |name: &'static str| kernel.invoke(name, json!({}), InvokeOptions::default());
    run("s").await.unwrap();
    assert!(trace.take().is_empty());
    run("p").await.unwrap();
    assert_eq!(trace.take(), [r#"mark="inherited""#]);
}

#[tokio::test]
async fn static_keys_stay_data_and_are_not_middleware() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("mark", &trace))
        .native(passing("other", &trace))
        .native(probe(
            "name: s\nmetadata:\n  mark: { v: 1 }\n  other: true\n  $static: [mark]\n",
            |ctx| get(ctx, "run.middleware.mark"),
        ))
        .build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!({"v": 1}));
    assert_eq!(trace.take(), ["other"]);
}

/// `ping` (a skill) and `pong` (a middleware) name each other: one strongly connected component.
fn ping_pong(ping_meta: &str, trace: &Trace) -> Kernel {
    let p = Project::new();
    p.builder()
        .native(middleware("pong", "  ping: true\n", trace, |n, t, _| {
            format!("{n}@{t}")
        }))
        .native(probe(
            &format!("name: ping\nmetadata:\n  pong: true\n  solo: true\n{ping_meta}"),
            |ctx| get(ctx, "run.middleware.pong"),
        ))
        .native(with_target("solo", trace))
        .build()
}

#[tokio::test]
async fn keys_in_the_tools_own_strongly_connected_component_are_demoted_to_data() {
    let trace = Trace::default();
    let kernel = ping_pong("", &trace);
    let out = kernel
        .invoke("ping", json!({}), InvokeOptions::default())
        .await;
    // `pong` stays in the metadata as data; `solo` (not in the component) still runs.
    assert_eq!(out_of(out), json!(true));
    assert_eq!(trace.take(), ["solo@ping"]);
}

#[tokio::test]
async fn dynamic_makes_a_demoted_key_run_as_middleware() {
    let trace = Trace::default();
    let kernel = ping_pong("  $dynamic: [pong]\n", &trace);
    kernel
        .invoke("ping", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["pong@ping", "solo@ping"]);
}

#[tokio::test]
async fn dir_is_interpolated_per_level_as_the_declaring_skills_folder() {
    let p = Project::new();
    p.skill(
        "lib/base.skill.md",
        "---\nname: base\nmetadata:\n  where: \"${dir}/data\"\n---\n",
    )
    .skill(
        "child.skill.md",
        "---\nname: child\nmetadata:\n  $inherit: base\n  here: \"${dir}\"\n  who: \"${name}\"\n---\n",
    );
    let merged = merged_of(&p.kernel(), "child");
    let skills = p.path().join("skills");
    assert_eq!(
        merged["where"],
        json!(format!("{}/data", skills.join("lib").display()))
    );
    assert_eq!(merged["here"], json!(skills.display().to_string()));
    assert_eq!(merged["who"], json!("child"));
}

#[tokio::test]
async fn args_variables_are_interpolated_at_each_invocation() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(with_args("count", &trace))
        .native(skill(
            "s",
            "  mark: \"hello ${args.who}\"\n  count: \"${args.n}\"\n",
            &trace,
        ))
        .build();
    for (who, n) in [("Ada", 1), ("Bob", 2)] {
        kernel
            .invoke("s", json!({"who": who, "n": n}), InvokeOptions::default())
            .await
            .unwrap();
    }
    // A whole-string variable keeps its JSON type (`n` is a number).
    assert_eq!(
        trace.take(),
        [
            r#"mark="hello Ada""#,
            "count=1",
            "s",
            r#"mark="hello Bob""#,
            "count=2",
            "s"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Middleware sources.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn keys_that_do_not_name_a_tool_are_skipped_silently() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("mark", &trace))
        .native(probe(
            "name: s\nmetadata:\n  no-such-tool: { x: 1 }\n  mark: true\n",
            |ctx| get(ctx, "run.middleware.no-such-tool"),
        ))
        .build();
    let out = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(out_of(out), json!({"x": 1}));
    assert_eq!(trace.take(), ["mark"]);
    assert!(!chain_of(&kernel, "s").contains(&"no-such-tool".to_string()));
}

#[tokio::test]
async fn metadata_keys_map_to_tool_names_without_prefix_expansion() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("meta-mark", &trace))
        .native(passing("mark-meta", &trace))
        .native(skill("s", "  mark: true\n", &trace))
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), ["s"]);
}

#[tokio::test]
async fn the_metadata_value_becomes_the_middleware_args() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(skill(
            "s",
            "  mark: { level: 3, tags: [a, b] }\n  $order:\n    mark: { after: [$configure], before: [$post-configure] }\n",
            &trace,
        ))
        .build();
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(trace.take(), [r#"mark={"level":3,"tags":["a","b"]}"#, "s"]);
}

#[tokio::test]
async fn ordering_comes_from_order_not_from_the_metadata_value() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_args("mark", &trace))
        .native(passing("later", &trace))
        .native(skill(
            "s",
            "  mark: { after: [later] }\n  later: true\n",
            &trace,
        ))
        .build();
    run_named(&kernel, "s").await.unwrap();
    // `after` inside the value is plain args; only `$order` orders.
    assert_eq!(trace.take(), [r#"mark={"after":["later"]}"#, "later", "s"]);
}

// ---------------------------------------------------------------------------------------------
// The middleware chain.
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Dynamic injection.
// ---------------------------------------------------------------------------------------------

fn inject_kernel(trace: &Trace, make: fn() -> Vec<Entry>) -> Kernel {
    let p = Project::new();
    p.builder()
        .native(injector(trace, make))
        .native(passing("first", trace))
        .native(passing("later", trace))
        .native(passing("px", trace))
        .native(passing("py", trace))
        .native(skill(
            "s",
            "  first: true\n  inj: true\n  later: true\n",
            trace,
        ))
        .build()
}

async fn run_s(kernel: &Kernel) {
    kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn injected_entries_are_inserted_right_after_the_current_position() {
    let trace = Trace::default();
    run_s(&inject_kernel(&trace, || vec![entry("px", &[], &[])])).await;
    assert_eq!(trace.take(), ["first", "inj", "px", "later", "s"]);
}

#[tokio::test]
async fn injected_middleware_only_runs_downstream() {
    let trace = Trace::default();
    // Asking to run before an entry that already ran cannot move it upstream.
    run_s(&inject_kernel(&trace, || {
        vec![entry("px", &[], &["first"])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "px", "later", "s"]);
}

#[tokio::test]
async fn injected_constraints_naming_executed_middleware_are_stripped_silently() {
    let trace = Trace::default();
    // `before: [inj]` names the running entry; `after: [later]` still applies.
    run_s(&inject_kernel(&trace, || {
        vec![entry("px", &["later"], &["inj"])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "later", "px", "s"]);
}

#[tokio::test]
async fn injected_entries_with_constraints_resort_the_rest_of_the_chain() {
    let trace = Trace::default();
    run_s(&inject_kernel(&trace, || {
        vec![entry("px", &[], &[]), entry("py", &[], &["px"])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "py", "px", "later", "s"]);
}

#[tokio::test]
async fn injected_entries_without_constraints_keep_the_order_given() {
    let trace = Trace::default();
    run_s(&inject_kernel(&trace, || {
        vec![entry("py", &[], &[]), entry("px", &[], &[])]
    }))
    .await;
    assert_eq!(trace.take(), ["first", "inj", "py", "px", "later", "s"]);
}

#[tokio::test]
async fn directive_middleware_runs_after_all_metadata_middleware_in_document_order() {
    let p = Project::new();
    p.skill(
        "s.skill.md",
        "---\nname: s\nmetadata:\n  meta-a: true\n  meta-b: true\n  meta-c: true\n  $order:\n    meta-b: { after: [$post-configure], before: [$pre-execute] }\n    meta-c: { after: [$pre-execute], before: [$execute] }\n---\nFirst :dir-two[x], then :dir-one[y].",
    );
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("meta-a", &trace))
        .native(passing("meta-b", &trace))
        .native(passing("meta-c", &trace))
        .native(with_args("dir-one", &trace))
        .native(with_args("dir-two", &trace))
        .build();
    run_s(&kernel).await;
    let seen = trace.take();
    let names: Vec<&str> = seen
        .iter()
        .map(|s| s.split('=').next().unwrap_or(s))
        .collect();
    assert_eq!(names, ["meta-a", "meta-b", "meta-c", "dir-two", "dir-one"]);
    // A directive `:name[label]` triggers the tool `name` with its label.
    assert!(seen[3].contains(r#""label":"x""#), "{seen:?}");
    assert!(seen[4].contains(r#""label":"y""#), "{seen:?}");
}

// ---------------------------------------------------------------------------------------------
// Cycles.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cycles_in_order_constraints_are_a_configuration_error_naming_the_cycle() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(passing("ca", &trace))
        .native(passing("cb", &trace))
        .native(skill(
            "s",
            "  ca: true\n  cb: true\n  $order:\n    ca: { after: [cb] }\n    cb: { after: [ca] }\n",
            &trace,
        ))
        .build();
    let err = kernel
        .invoke("s", json!({}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let msg = err.message();
    assert!(
        msg.contains("ca -> cb -> ca") || msg.contains("cb -> ca -> cb"),
        "{msg}"
    );
    assert!(trace.take().is_empty());
}

#[tokio::test]
async fn invocation_stack_cycles_are_skipped_with_a_warning() {
    let p = Project::new();
    let trace = Trace::default();
    // `ma`'s pipeline runs `mb`, whose pipeline runs `ma` again (`$dynamic` bypasses automatic
    // static, so only the invocation-time check can stop it).
    let kernel = p
        .builder()
        .native(middleware(
            "ma",
            "  mb: true\n  $dynamic: [mb]\n",
            &trace,
            |n, t, _| format!("{n}@{t}"),
        ))
        .native(middleware(
            "mb",
            "  ma: true\n  $dynamic: [ma]\n",
            &trace,
            |n, t, _| format!("{n}@{t}"),
        ))
        .native(probe("name: s\nmetadata:\n  ma: true\n", |ctx| {
            Ok(Value::Array(ctx.tail(&json!({"type": "cycle-skipped"}))))
        }))
        .build();
    let events = out_of(
        kernel
            .invoke("s", json!({}), InvokeOptions::default())
            .await,
    );
    assert_eq!(trace.take(), ["mb@ma", "ma@s"]);
    let events = events.as_array().expect("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["level"], json!("warn"));
    assert_eq!(events[0]["entry"], json!("ma"));
}

#[tokio::test]
async fn independent_invocations_of_the_same_middleware_are_not_cycles() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: mw\nmetadata:\n  role: middleware\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    t.push(format!("mw@{}", target.tool_name()));
                    if target.tool_name() == "outer" {
                        // A separate pipeline started from inside `mw` runs `mw` again.
                        ctx.invoke("inner", json!({}), InvokeOptions::default())
                            .await?;
                    }
                    target.next().await?;
                    Ok(None)
                }
            },
        ))
        .native(skill("inner", "  mw: true\n", &trace))
        .native(probe("name: outer\nmetadata:\n  mw: true\n", |ctx| {
            Ok(Value::Array(ctx.tail(&json!({"type": "cycle-skipped"}))))
        }))
        .build();
    let events = out_of(
        kernel
            .invoke("outer", json!({}), InvokeOptions::default())
            .await,
    );
    assert_eq!(trace.take(), ["mw@outer", "mw@inner", "inner"]);
    assert_eq!(events, json!([]));
}

// ---------------------------------------------------------------------------------------------
// Automatic static.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_middleware_in_the_default_pipeline_does_not_run_inside_its_own_pipeline() {
    let p = Project::new();
    let bundled = include_str!("../../skills/pipeline/default.skill.md");
    let shadow = bundled.replacen("metadata:\n", "metadata:\n  audit: true\n", 1);
    assert_ne!(shadow, bundled);
    p.skill("default-pipeline.skill.md", &shadow);
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(with_target("audit", &trace))
        .native(probe("name: s\n", |ctx| {
            Ok(Value::Array(ctx.tail(&json!({"type": "cycle-skipped"}))))
        }))
        .build();
    let events = out_of(
        kernel
            .invoke("s", json!({}), InvokeOptions::default())
            .await,
    );
    // Only the user skill is audited: not `audit` itself, nor the pipeline middleware.
    assert_eq!(trace.take(), ["audit@s"]);
    assert_eq!(events, json!([]));
    assert_eq!(chain_of(&kernel, "audit"), ["<body>"]);
    assert_eq!(merged_of(&kernel, "audit").get("audit"), Some(&json!(true)));
}

#[tokio::test]
async fn a_user_middleware_gets_the_full_pipeline() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(middleware(
            "strict",
            "  params:\n    type: object\n    properties:\n      level: { type: integer }\n    required: [level]\n",
            &trace,
            |n, _, a| format!("{n}={a}"),
        ))
        .native(skill("good", "  strict: { level: 2 }\n", &trace))
        .native(skill("bad", "  strict: { level: high }\n", &trace))
        .build();
    assert!(chain_of(&kernel, "strict").contains(&"validate-args".to_string()));
    run_named(&kernel, "good").await.unwrap();
    assert_eq!(trace.take(), [r#"strict={"level":2}"#, "good"]);
    // The middleware's own `validate-args` checks the args the cascade gave it.
    let err = run_named(&kernel, "bad").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgs);
    assert_eq!(err.tool(), Some("strict"));
    assert!(trace.take().is_empty());
}

async fn run_named(kernel: &Kernel, name: &str) -> skillgate::Result<Option<Arc<Value>>> {
    kernel
        .invoke(name.to_string(), json!({}), InvokeOptions::default())
        .await
}

#[tokio::test]
async fn self_references_are_always_removed() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: selfish\nmetadata:\n  selfish: { x: 1 }\n  $dynamic: [selfish]\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    t.push("selfish");
                    Ok(Some(Value::Array(
                        ctx.tail(&json!({"type": "cycle-skipped"})),
                    )))
                }
            },
        ))
        .build();
    assert!(!chain_of(&kernel, "selfish").contains(&"selfish".to_string()));
    let events = out_of(run_named(&kernel, "selfish").await);
    assert_eq!(trace.take(), ["selfish"]);
    assert_eq!(events, json!([]));
}

#[tokio::test]
async fn automatic_static_is_recomputed_when_tool_caches_are_cleared() {
    let trace = Trace::default();
    let p = Project::new();
    let kernel = p
        .builder()
        .native(with_target("pong", &trace))
        .native(skill("ping", "  pong: true\n", &trace))
        .build();
    run_named(&kernel, "ping").await.unwrap();
    assert_eq!(trace.take(), ["pong@ping", "ping"]);
    // `pong` now names `ping` back: the two form one component and `pong` becomes data.
    kernel
        .registry()
        .register(middleware("pong", "  ping: true\n", &trace, |n, t, _| {
            format!("{n}@{t}")
        }));
    run_named(&kernel, "ping").await.unwrap();
    assert_eq!(trace.take(), ["ping"]);
}

// ---------------------------------------------------------------------------------------------
// Execution flow and return values.
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Error handling.
// ---------------------------------------------------------------------------------------------

/// A middleware that catches errors of `next()`: records them, then rethrows or recovers.
fn handler(name: &'static str, rethrow: bool, trace: &Trace) -> Tool {
    let t = trace.clone();
    native(
        &format!("name: {name}\nmetadata:\n  role: middleware\n"),
        move |ctx, _args| {
            let t = t.clone();
            async move {
                let target = ctx.ctx_target()?;
                match target.next().await {
                    Ok(_) => t.push(format!("{name}: ok")),
                    Err(err) => {
                        t.push(format!("{name}: caught {}", err.message()));
                        if rethrow {
                            return Err(err);
                        }
                        target.set("locals.result", json!(format!("recovered by {name}")))?;
                    }
                }
                Ok(None)
            }
        },
    )
}

fn failing(name: &str, meta: &str) -> Tool {
    native(
        &format!("name: {name}\nmetadata:\n{meta}"),
        |_ctx, _args| async move { Err(SkillError::failed("boom")) },
    )
}

#[tokio::test]
async fn inner_handlers_catch_first_and_a_rethrow_reaches_the_outer_handler() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(handler("outer-h", false, &trace))
        .native(handler("inner-h", true, &trace))
        .native(failing("s", "  outer-h: true\n  inner-h: true\n"))
        .build();
    assert_eq!(
        out_of(run_named(&kernel, "s").await),
        json!("recovered by outer-h")
    );
    assert_eq!(
        trace.take(),
        ["inner-h: caught boom", "outer-h: caught boom"]
    );
}

#[tokio::test]
async fn an_error_an_inner_handler_recovers_from_does_not_reach_outer_handlers() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(handler("outer-h", false, &trace))
        .native(handler("inner-h", false, &trace))
        .native(failing("s", "  outer-h: true\n  inner-h: true\n"))
        .build();
    assert_eq!(
        out_of(run_named(&kernel, "s").await),
        json!("recovered by inner-h")
    );
    assert_eq!(trace.take(), ["inner-h: caught boom", "outer-h: ok"]);
}

#[tokio::test]
async fn errors_propagate_through_next_and_cleanup_after_it_still_runs() {
    let p = Project::new();
    let trace = Trace::default();
    let t = trace.clone();
    let kernel = p
        .builder()
        .native(native(
            "name: guard\nmetadata:\n  role: middleware\n",
            move |ctx, _args| {
                let t = t.clone();
                async move {
                    let target = ctx.ctx_target()?;
                    let out = target.next().await;
                    t.push("cleanup");
                    out?;
                    t.push("not reached");
                    Ok(None)
                }
            },
        ))
        .native(failing("s", "  guard: true\n"))
        .build();
    let err = run_named(&kernel, "s").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.message(), "boom");
    assert_eq!(trace.take(), ["cleanup"]);
}

#[tokio::test]
async fn an_error_handler_ordered_before_execute_recovers_by_setting_the_target_result() {
    let p = Project::new();
    let trace = Trace::default();
    let kernel = p
        .builder()
        .native(handler("my-error-handler", false, &trace))
        .native(failing(
            "s",
            "  $order:\n    my-error-handler: { after: [$pre-execute], before: [execute] }\n  my-error-handler: true\n",
        ))
        .build();
    assert_eq!(
        out_of(run_named(&kernel, "s").await),
        json!("recovered by my-error-handler")
    );
    assert_eq!(trace.take(), ["my-error-handler: caught boom"]);
    let chain = chain_of(&kernel, "s");
    let at = |n: &str| chain.iter().position(|x| x == n).expect("in the chain");
    assert!(at("my-error-handler") < at("execute"), "{chain:?}");
}
