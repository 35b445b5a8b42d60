//! Config middleware that fill `locals.config` (`workspace`, `model`; `cwd` and `paths` have
//! their own tests) and `$global` metadata levels.

use serde_json::{Value, json};
use skillgate::InvokeOptions;

use crate::support::common::{Project, plain};

async fn run(p: &Project, name: &str) -> Result<Value, String> {
    p.kernel()
        .invoke(name, json!({}), InvokeOptions::default())
        .await
        .map(|out| plain(out).unwrap_or(Value::Null))
        .map_err(|e| e.message().to_string())
}

const SHOW_MODEL: &str = "export const frontmatter = { metadata: { model: MODEL } };\nexport default async (ctx) => ctx.locals.config.model;\n";

#[tokio::test]
async fn model_records_the_checked_settings_in_locals_config() {
    let p = Project::new();
    p.skill(
        "m.skill.js",
        &SHOW_MODEL.replace("MODEL", "{ model: 'openai/gpt-4o-mini', temperature: 0.2 }"),
    )
    .skill(
        "s.skill.js",
        &SHOW_MODEL.replace("MODEL", "'anthropic/claude-x'"),
    );
    assert_eq!(
        run(&p, "m").await.unwrap(),
        json!({"provider": "openai", "model": "gpt-4o-mini", "temperature": 0.2})
    );
    assert_eq!(
        run(&p, "s").await.unwrap(),
        json!({"provider": "anthropic", "model": "claude-x"})
    );
}

#[tokio::test]
async fn a_bad_model_fails_before_anything_runs_naming_the_skill_file() {
    let p = Project::new();
    p.skill(
        "bad.skill.js",
        "export const frontmatter = { metadata: { model: { model: 'openai/x', colour: 1 } } };\nexport default async () => 'ran';\n",
    );
    let err = run(&p, "bad").await.unwrap_err();
    let file = p.path().join("skills/bad.skill.js").display().to_string();
    assert!(err.starts_with(&format!("`bad` ({file}): ")), "{err}");
    assert!(
        err.contains("metadata.model.colour is not a model setting"),
        "{err}"
    );
}

#[tokio::test]
async fn workspace_true_is_a_folder_per_skill_under_the_working_folder() {
    let p = Project::new();
    p.skill(
        "w.skill.js",
        "export const frontmatter = { metadata: { workspace: true } };\nexport default async (ctx) => ctx.locals.config.workspace;\n",
    );
    let ws = run(&p, "w").await.unwrap();
    let ws = ws.as_str().expect("a path");
    assert!(ws.ends_with(".skillgate/workspaces/w"), "{ws}");
    assert!(std::path::Path::new(ws).is_dir());
    let err = run_bad_workspace(&p).await;
    assert!(
        err.contains("`workspace` of `v`")
            && err.contains("must be a folder path or `true`, got 3"),
        "{err}"
    );
}

async fn run_bad_workspace(p: &Project) -> String {
    p.skill(
        "v.skill.js",
        "export const frontmatter = { metadata: { workspace: 3 } };\nexport default async () => 'ran';\n",
    );
    run(p, "v").await.unwrap_err()
}

/// `:context[run.middleware.greeting]` with a default, as skill `name`.
fn greeter(name: &str, extra: &str) -> String {
    format!(
        "---\nname: {name}\nmetadata:\n{extra}---\n:context[run.middleware.greeting]{{default=none}}/:context[run.middleware.secret]{{default=none}}"
    )
}

#[tokio::test]
async fn global_metadata_reaches_every_skill_below_its_own_keys_unless_it_opts_out() {
    let p = Project::new();
    p.skill(
        "house.skill.md",
        "---\nname: house\nmetadata:\n  $global: true\n  $private: [secret]\n  greeting: hi\n  secret: s\n---\nhouse rules",
    )
    .skill("deep/t.skill.md", &greeter("t", "  tags: [x]\n"))
    .skill("own.skill.md", &greeter("own", "  greeting: own\n"))
    .skill("out.skill.md", &greeter("out", "  $global: false\n"));
    assert_eq!(
        run(&p, "t").await.unwrap(),
        json!("hi/none"),
        "public keys only"
    );
    assert_eq!(
        run(&p, "own").await.unwrap(),
        json!("own/none"),
        "own keys win"
    );
    assert_eq!(
        run(&p, "out").await.unwrap(),
        json!("none/none"),
        "`$global: false` opts out"
    );
}

#[tokio::test]
async fn a_projects_main_skill_outranks_global_metadata() {
    let p = Project::new();
    p.write(
        "main.skill.md",
        "---\nname: main\nmetadata:\n  role: main\n  greeting: main\n---\nmain",
    )
    .skill(
        "house.skill.md",
        "---\nname: house\nmetadata:\n  $global: true\n  greeting: hi\n---\nhouse",
    )
    .skill("t.skill.md", &greeter("t", "  tags: [x]\n"));
    assert_eq!(run(&p, "t").await.unwrap(), json!("main/none"));
}
