//! `agent-execute` (spec 05): a markdown skill with `model:` is handed to the `agent` skill with
//! its expanded prompt, its model settings, `allowedTools` from `allowed-tools` and its
//! `returns` schema; without an agent provider it fails with `NoAgentProvider`.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use skillgate::middleware::native;
use skillgate::{ErrorKind, InvokeOptions, Kernel};

use crate::support::common::{Project, plain};

const SKILL: &str = "---\nname: summarize\nmetadata:\n  model: { model: openai/fake-1, temperature: 0 }\n  allowed-tools: [file-read, \"web-*\"]\n  returns:\n    type: object\n    properties:\n      summary: { type: string }\n    required: [summary]\n---\nSummarize :arg[topic].\n";

/// A kernel with the built-in middleware (the agent's two among them) and event skills but no
/// agent provider.
fn without_agent(project: &Project) -> skillgate::kernel::KernelBuilder {
    Kernel::builder(project.path())
        .builtins(skillgate::middleware::builtins())
        .builtins(vec![
            skillgate::agent::execute_middleware::tool(),
            skillgate::agent::model_middleware::tool(),
        ])
        .builtins(skillgate::events::skills::tools())
}

#[tokio::test]
async fn agent_execute_hands_the_prompt_model_allowed_tools_and_returns_to_the_agent() {
    let project = Project::new();
    project.skill("summarize.skill.md", SKILL);
    let seen: Arc<Mutex<Option<Value>>> = Arc::default();
    let kernel = {
        let seen = seen.clone();
        without_agent(&project)
            .native(native("name: agent\n", move |_ctx, args| {
                let seen = seen.clone();
                async move {
                    *seen.lock() = Some((*args).clone());
                    Ok(Some(json!({ "summary": "short" })))
                }
            }))
            .build()
    };
    let out = kernel
        .invoke(
            "summarize",
            json!({ "topic": "tides" }),
            InvokeOptions::default(),
        )
        .await
        .map(plain)
        .unwrap();
    assert_eq!(
        out,
        Some(json!({ "summary": "short" })),
        "the agent's answer is the result"
    );
    let args = seen.lock().clone().expect("the agent ran");
    assert_eq!(args["prompt"], "Summarize tides.\n");
    assert_eq!(
        args["config"],
        json!({ "model": "openai/fake-1", "temperature": 0 })
    );
    assert_eq!(args["allowedTools"], json!(["file-read", "web-*"]));
    assert_eq!(
        args["returns"],
        json!({ "type": "object", "properties": { "summary": { "type": "string" } }, "required": ["summary"] })
    );
}

#[tokio::test]
async fn a_skill_with_a_model_and_no_agent_provider_fails_with_no_agent_provider() {
    let project = Project::new();
    project.skill("summarize.skill.md", SKILL);
    project.skill("plain.skill.md", "---\nname: plain\n---\nJust text.\n");
    let kernel = without_agent(&project).build();
    let err = kernel
        .invoke(
            "summarize",
            json!({ "topic": "x" }),
            InvokeOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoAgentProvider, "{err}");
    assert!(
        err.message().contains("`summarize` asks for a model")
            && err.message().contains("no agent provider is installed"),
        "{err}"
    );
    // A skill without a model still runs as a template on the same kernel.
    let out = kernel
        .invoke("plain", json!({}), InvokeOptions::default())
        .await
        .map(plain)
        .unwrap();
    assert_eq!(out, Some(json!("Just text.\n")));
}
