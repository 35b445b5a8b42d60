//! Spec 02, Invocation step 7: the cascade. Levels, private keys, `$inherit`, `$merge`,
//! `$remove`, `$static`/`$dynamic` and strongly connected components, interpolation.

use serde_json::{Map, json};
use skillgate::{InvokeOptions, Kernel};

use super::{get, out_of, probe};
use crate::support::common::{
    Project, Trace, chain_of, merged_of, middleware, passing, skill, with_args, with_target,
};

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
