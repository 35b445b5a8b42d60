//! The directives a markdown body can use, each expanded by its own tool.

use serde_json::{Value, json};
use skillgate::InvokeOptions;

use crate::common::{Project, plain};

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
