//! The directives a markdown body can use, each expanded by its own tool.

use serde_json::{Value, json};
use skillgate::InvokeOptions;

use crate::support::common::{Project, plain};

async fn expand(body: &str, args: Value) -> String {
    let p = Project::new();
    p.skill("t.skill.md", &format!("---\nname: t\n---\n{body}"))
        .skill(
            "shout.skill.md",
            "---\nname: shout\nmetadata:\n  params: { type: object, properties: { word: { type: string } } }\n---\n:arg[word]!",
        );
    let out = p
        .kernel()
        .invoke("t", args, InvokeOptions::default())
        .await
        .expect("template runs");
    plain(out)
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("a string")
}

#[tokio::test]
async fn arg_inserts_an_argument_or_its_default() {
    assert_eq!(
        expand("Hi :arg[name]", json!({"name": "Ada"})).await,
        "Hi Ada"
    );
    assert_eq!(
        expand("Hi :arg[name]{default=you}", json!({})).await,
        "Hi you"
    );
    assert_eq!(
        expand("n=:arg[n]", json!({"n": {"a": 1}})).await,
        r#"n={"a":1}"#
    );
}

#[tokio::test]
async fn env_inserts_an_environment_variable_or_its_default() {
    let path = std::env::var("PATH").expect("PATH is set");
    assert_eq!(expand(":env[PATH]", json!({})).await, path);
    assert_eq!(
        expand(":env[SKILLGATE_SURELY_UNSET_VAR]{default=none}", json!({})).await,
        "none"
    );
}

#[tokio::test]
async fn context_inserts_a_context_property_by_path() {
    assert_eq!(
        expand("tool=:context[run.tool.name]", json!({})).await,
        "tool=t"
    );
    assert_eq!(expand("x=:context[args.x]", json!({"x": 5})).await, "x=5");
}

#[tokio::test]
async fn config_inserts_a_value_of_locals_config() {
    let out = expand("lib=:config[library]", json!({})).await;
    assert_eq!(out, "lib=skillgate");
}

#[tokio::test]
async fn skill_inserts_another_skills_result_with_attributes_as_args() {
    assert_eq!(
        expand("say :skill[shout]{word=hey}", json!({})).await,
        "say hey!"
    );
}

#[tokio::test]
async fn unknown_directives_and_code_stay_literal() {
    assert_eq!(expand("a :nope[x] b", json!({})).await, "a :nope[x] b");
    assert_eq!(
        expand("`:arg[name]` and :arg[name]", json!({"name": "Z"})).await,
        "`:arg[name]` and Z"
    );
    assert_eq!(
        expand("time 10:30, url http://x", json!({})).await,
        "time 10:30, url http://x"
    );
}

/// Runs skill `t` (written as `skills/t.skill.md` with `front` as extra frontmatter lines and
/// `body`) in project `p`, returning its text or its error message.
async fn run_in(p: &Project, front: &str, body: &str, args: Value) -> Result<String, String> {
    p.skill("t.skill.md", &format!("---\nname: t\n{front}---\n{body}"));
    p.kernel()
        .invoke("t", args, InvokeOptions::default())
        .await
        .map(|out| {
            plain(out)
                .and_then(|v| v.as_str().map(str::to_string))
                .expect("a string")
        })
        .map_err(|e| e.message().to_string())
}

#[tokio::test]
async fn path_resolves_against_the_skill_folder_and_folds_dot_dot() {
    let p = Project::new();
    let skills = std::path::absolute(p.path().join("skills")).unwrap();
    let out = run_in(
        &p,
        "",
        ":path[data/x.csv] :path[../README.md] :path[/etc/hosts]",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        format!(
            "{} {} /etc/hosts",
            skills.join("data/x.csv").display(),
            skills.parent().unwrap().join("README.md").display()
        )
    );
}

#[tokio::test]
async fn workspace_creates_its_folder_and_path_can_resolve_from_it() {
    let p = Project::new();
    let out = run_in(
        &p,
        "metadata:\n  workspace: out/run\n",
        "ws=:config[workspace] file=:path[a.txt]{from=workspace}",
        json!({}),
    )
    .await
    .unwrap();
    let (ws, file) = out
        .strip_prefix("ws=")
        .and_then(|rest| rest.split_once(" file="))
        .expect("both parts");
    assert!(ws.ends_with("out/run"), "{ws}");
    assert!(std::path::Path::new(ws).is_absolute(), "{ws}");
    assert!(
        std::path::Path::new(ws).is_dir(),
        "the workspace is created"
    );
    assert_eq!(file, format!("{ws}/a.txt"));
}

#[tokio::test]
async fn inline_inserts_a_files_text_without_expanding_it() {
    let p = Project::new();
    p.skill("notes/style.md", "Be brief, :arg[name].\n");
    let out = run_in(
        &p,
        "",
        "Rules: :inline[notes/style.md]",
        json!({"name": "Ada"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "Rules: Be brief, :arg[name].\n");
}

#[tokio::test]
async fn inline_refuses_files_outside_the_project_and_names_the_directive() {
    let p = Project::new();
    let err = run_in(&p, "", "line one\nsee :inline[/etc/hostname]", json!({}))
        .await
        .unwrap_err();
    let at = format!(
        "{}:5:5: `:inline[/etc/hostname]`: ",
        p.path().join("skills/t.skill.md").display()
    );
    assert!(err.starts_with(&at), "{err}");
    assert!(err.contains("outside the skill's project"), "{err}");

    // A symlink inside the project that points out of it is refused too.
    std::os::unix::fs::symlink("/etc/hostname", p.path().join("skills/link")).unwrap();
    let err = run_in(&p, "", ":inline[link]", json!({}))
        .await
        .unwrap_err();
    assert!(err.contains("outside the skill's project"), "{err}");
}

#[tokio::test]
async fn a_failing_directive_names_file_line_and_column() {
    let p = Project::new();
    let err = run_in(
        &p,
        "description: x\n",
        "# Title\n\nUse it:  :inline[missing.md]{a=1}\n",
        json!({}),
    )
    .await
    .unwrap_err();
    // Line 1 `---`, 2 name, 3 description, 4 `---`, then the body from line 5.
    let at = format!(
        "{}:7:10: `:inline[missing.md]{{a=1}}`: cannot read",
        p.path().join("skills/t.skill.md").display()
    );
    assert!(err.starts_with(&at), "{err}\nwanted {at}");

    let err = run_in(&p, "", "x :skill[shuot]", json!({}))
        .await
        .unwrap_err();
    assert!(
        err.contains("t.skill.md:4:3: `:skill[shuot]`: no skill named `shuot`"),
        "{err}"
    );
}

#[tokio::test]
async fn eval_inserts_an_expressions_value_computed_from_the_args() {
    let p = Project::new();
    let out = run_in(
        &p,
        "",
        ":eval[args.n * 2] :eval[args.items.map(x => x.toUpperCase()).join('+')]",
        json!({"n": 21, "items": ["a", "b"]}),
    )
    .await
    .unwrap();
    assert_eq!(out, "42 A+B");
}

#[tokio::test]
async fn eval_runs_in_the_sandbox_as_untrusted_code() {
    let p = Project::new();
    let out = run_in(
        &p,
        "",
        ":eval[typeof process + ' ' + typeof require]",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(out, "undefined undefined", "no host objects in the sandbox");
    let outside = p.path().join("skills/t.skill.md").display().to_string();
    let err = run_in(
        &p,
        "",
        &format!(":eval[await ctx.manager.invoke('file://{outside}')]"),
        json!({}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("t.skill.md:4:1: `:eval["), "{err}");
    assert!(err.contains("bare"), "only bare tool names pass: {err}");
}

#[tokio::test]
async fn eval_syntax_errors_name_the_directive() {
    let p = Project::new();
    let err = run_in(&p, "", "a\n  :eval[1 +* 2]", json!({}))
        .await
        .unwrap_err();
    assert!(err.contains("t.skill.md:5:3: `:eval[1 +* 2]`: "), "{err}");
}

#[tokio::test]
async fn script_runs_a_file_in_the_sandbox_with_attributes_over_the_args() {
    let p = Project::new();
    p.skill(
        "lib/greet.js",
        "const who = args.who.toUpperCase();\nreturn `${args.greeting}, ${who} (${typeof process})`;\n",
    );
    let out = run_in(
        &p,
        "",
        ":script[lib/greet.js]{greeting=Hello}",
        json!({"who": "ada", "greeting": "Bye"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "Hello, ADA (undefined)");
}

#[tokio::test]
async fn tool_describes_a_tool_with_its_args_schema() {
    let p = Project::new();
    p.skill(
        "shout.skill.md",
        "---\nname: shout\ndescription: Shouts a word.\nmetadata:\n  params: { type: object, properties: { word: { type: string } } }\n---\n:arg[word]!",
    );
    let out = run_in(&p, "", "Tools: :tool[shout]", json!({}))
        .await
        .unwrap();
    assert_eq!(
        out,
        r#"Tools: `shout`: Shouts a word. (args: {"type":"object","properties":{"word":{"type":"string"}}})"#
    );
    let out = run_in(&p, "", ":tool[shout]{format=json}", json!({}))
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["name"], "shout");
    assert_eq!(v["params"]["properties"]["word"]["type"], "string");
    let err = run_in(&p, "", ":tool[shuot]", json!({})).await.unwrap_err();
    assert!(err.contains("did you mean `shout`"), "{err}");
}
