//! The agent (spec 05) against the fake model server: skills with `model:` run the loop, the
//! model's code runs in the sandbox, and every limit, the returns reminder, discovery,
//! self-recursion, the untrusted-ref rule and the model hook hold.

mod discovery;
mod execute;
mod hooks;
mod limits;
mod loop_;
mod model_anthropic;
mod model_bedrock;
mod model_openai;
mod provider;

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use skillgate::kernel::Kernel;
use skillgate::middleware::native;
use skillgate::{InvokeOptions, Result};

use crate::support::common::Project;
use crate::support::model_fake::{ModelFake, Reply, openai_text, openai_tool_call};

/// A JavaScript skill that adds `a` and `b`.
pub const ADD: &str = r#"export const frontmatter = {
  name: 'add',
  description: 'Adds two numbers.',
  metadata: { params: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } },
};
export default async function (ctx, args) { return args.a + args.b; }
"#;

/// A skill with a model pointed at the fake, with more metadata lines (indented two spaces
/// under `metadata:`) and more model settings (indented four spaces under `model:`).
pub fn agent_skill(name: &str, fake: &ModelFake, metadata: &str, model: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: An agent skill under test.\nmetadata:\n  model:\n    model: openai/fake-1\n    base-url: {}\n    retries: 0\n{model}{metadata}---\nDo the task for :arg[who].\n",
        fake.base()
    )
}

/// What the probe middleware saw after the agent ran: the served skill's `locals.agent`.
#[derive(Clone, Default)]
pub struct Probe(pub Arc<Mutex<Option<Value>>>);

impl Probe {
    pub fn trace(&self) -> Vec<Value> {
        self.0
            .lock()
            .clone()
            .and_then(|a| a.get("trace").cloned())
            .and_then(|t| t.as_array().cloned())
            .unwrap_or_default()
    }

    pub fn kinds(&self) -> Vec<String> {
        self.trace()
            .iter()
            .filter(|e| e.get("delta") != Some(&Value::Bool(true)))
            .map(|e| e["type"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// A kernel over `project` with the `probe` middleware, which records `locals.agent` of the
/// skill it serves once the rest of the pipeline (the agent) is done.
pub fn kernel(project: &Project, probe: &Probe) -> Kernel {
    let seen = probe.clone();
    let tool = native(
        "name: probe\nmetadata:\n  role: middleware\n  visibility: hidden\n",
        move |ctx, _args| {
            let seen = seen.clone();
            async move {
                let target = ctx.ctx_target()?;
                let out = target.next().await;
                *seen.0.lock() = target.get("locals.agent")?;
                out?;
                Ok(None)
            }
        },
    );
    project.builder().native(tool).build()
}

/// Runs `skill` with the probe around it.
pub async fn run(kernel: &Kernel, skill: &str, args: Value) -> Result<Option<Value>> {
    let mut args = args;
    args["$context"] = json!({ "locals": { "middleware": [{ "name": "probe" }] } });
    let out = kernel.invoke(skill, args, InvokeOptions::default()).await?;
    Ok(out.map(|v| (*v).clone()))
}

/// A model turn that runs `code` through the invoke tool.
pub fn code_turn(id: &str, code: &str) -> Reply {
    let args = json!({ "code": code }).to_string();
    let (a, b) = args.split_at(args.len() / 2);
    Reply::Stream(openai_tool_call(id, "invoke", &[a, b]))
}

/// A model turn that answers with text.
pub fn text_turn(text: &str) -> Reply {
    Reply::Stream(openai_text(&[text], 10, 5))
}

/// The tool result the model was sent back for its call `id`, parsed.
pub fn tool_result(fake: &ModelFake, request: usize, id: &str) -> Value {
    let requests = fake.requests();
    let messages = requests[request].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let found = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no tool result for {id} in {messages:?}"));
    serde_json::from_str(found["content"].as_str().unwrap()).unwrap()
}
