//! Spec 02, Invocation steps 3 to 5: the child context (target, context seed), the tool's data
//! on it (origin, prompt, declaration), and the history frame.

use serde_json::{Value, json};
use skillgate::skills::tool::Tool;
use skillgate::{Context, InvokeOptions};

use super::{get, out_of, probe};
use crate::support::common::{Project, native};

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
