//! Spec 05's tool rules: constrained and discovery modes, hidden tools, self-recursion, and the
//! untrusted-ref rule for the model's code.

use serde_json::{Value, json};

use super::*;
use crate::support::model_fake::ModelFake;

const MUL: &str = r#"export const frontmatter = { name: 'mul', description: 'Multiplies.' };
export default async function (ctx, args) { return args.a * args.b; }
"#;

const SECRET: &str = r#"export const frontmatter = { name: 'secret', description: 'Hidden.', metadata: { visibility: 'hidden' } };
export default async function () { return 'the secret'; }
"#;

fn project() -> Project {
    let project = Project::new();
    project.skill("add.skill.js", ADD);
    project.skill("mul.skill.js", MUL);
    project.skill("secret.skill.js", SECRET);
    project
}

fn system_prompt(fake: &ModelFake) -> String {
    fake.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn constrained_mode_documents_the_listed_tools_and_refuses_the_others() {
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "return await ctx.manager.invoke('mul', { a: 2, b: 3 });",
        ),
        code_turn(
            "c2",
            "return await ctx.manager.invoke('add', { a: 2, b: 3 });",
        ),
        text_turn("ok"),
    ])
    .await;
    let project = project();
    project.skill(
        "narrow.skill.md",
        &agent_skill("narrow", &fake, "  allowed-tools: add\n", ""),
    );
    let kernel = kernel(&project, &Probe::default());
    run(&kernel, "narrow", json!({})).await.unwrap();
    let prompt = system_prompt(&fake);
    assert!(prompt.contains("### add"), "{prompt}");
    assert!(!prompt.contains("### mul"), "{prompt}");
    assert!(
        !prompt.contains("skill-list"),
        "no exploring in constrained mode"
    );
    let refused = tool_result(&fake, 1, "c1");
    assert_eq!(refused["error"]["code"], "denied", "{refused}");
    assert_eq!(tool_result(&fake, 2, "c2"), json!({ "result": 5 }));
}

#[tokio::test]
async fn discovery_mode_gives_skill_list_and_skill_describe_without_hidden_tools_or_itself() {
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "const all = await ctx.manager.invoke('skill-list', {}); return all.tools.map(t => t.name);",
        ),
        code_turn("c2", "return await ctx.manager.invoke('skill-describe', { name: 'add' });"),
        code_turn("c3", "return await ctx.manager.invoke('skill-describe', { name: 'secret' });"),
        text_turn("explored"),
    ])
    .await;
    let project = project();
    project.skill("explorer.skill.md", &agent_skill("explorer", &fake, "", ""));
    let kernel = kernel(&project, &Probe::default());
    run(&kernel, "explorer", json!({})).await.unwrap();
    let prompt = system_prompt(&fake);
    assert!(prompt.contains("skill-list"), "{prompt}");
    assert!(
        !prompt.contains("### add"),
        "tools are not inlined in discovery mode"
    );
    let listed: Vec<String> =
        serde_json::from_value(tool_result(&fake, 1, "c1")["result"].clone()).unwrap();
    for present in ["add", "mul", "skill-list", "skill-describe"] {
        assert!(
            listed.contains(&present.to_string()),
            "{present} in {listed:?}"
        );
    }
    for absent in ["secret", "explorer", "agent", "agent-model", "model-call"] {
        assert!(
            !listed.contains(&absent.to_string()),
            "{absent} in {listed:?}"
        );
    }
    let described = tool_result(&fake, 2, "c2");
    assert_eq!(described["result"]["params"]["required"], json!(["a", "b"]));
    assert_eq!(tool_result(&fake, 3, "c3")["error"]["code"], "not-found");
}

#[tokio::test]
async fn a_hidden_tool_is_usable_only_when_named_explicitly() {
    let fake = ModelFake::start(vec![
        code_turn("c1", "return await ctx.manager.invoke('secret', {});"),
        text_turn("ok"),
        code_turn("c2", "return await ctx.manager.invoke('secret', {});"),
        text_turn("ok"),
    ])
    .await;
    let project = project();
    project.skill(
        "wide.skill.md",
        &agent_skill("wide", &fake, "  allowed-tools: '*'\n", ""),
    );
    project.skill(
        "named.skill.md",
        &agent_skill("named", &fake, "  allowed-tools: '* secret'\n", ""),
    );
    let kernel = kernel(&project, &Probe::default());
    run(&kernel, "wide", json!({})).await.unwrap();
    run(&kernel, "named", json!({})).await.unwrap();
    assert_eq!(tool_result(&fake, 1, "c1")["error"]["code"], "denied");
    assert_eq!(
        tool_result(&fake, 3, "c2"),
        json!({ "result": "the secret" })
    );
    let named_prompt = fake.requests()[2].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        named_prompt.contains("### secret"),
        "a named tool is inlined in discovery mode"
    );
}

#[tokio::test]
async fn an_agent_skill_cannot_invoke_itself_unless_its_allowed_tools_name_it() {
    let fake = ModelFake::start(vec![
        code_turn("c1", "return await ctx.manager.invoke('looper', {});"),
        text_turn("stopped"),
        // The second skill names itself: its code may invoke it (the inner run answers at once).
        code_turn(
            "c2",
            "return await ctx.manager.invoke('recurser', { depth: 1 });",
        ),
        text_turn("inner answer"),
        text_turn("outer answer"),
    ])
    .await;
    let project = project();
    project.skill("looper.skill.md", &agent_skill("looper", &fake, "", ""));
    project.skill(
        "recurser.skill.md",
        &agent_skill("recurser", &fake, "  allowed-tools: 'add recurser'\n", ""),
    );
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "looper", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("stopped")));
    let refused = tool_result(&fake, 1, "c1");
    assert_eq!(refused["error"]["code"], "denied", "{refused}");
    assert!(!system_prompt(&fake).contains("### looper"));

    let out = run(&kernel, "recurser", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("outer answer")));
    let requests = fake.requests();
    assert!(
        requests[2].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("### recurser"),
        "a skill that names itself sees itself documented"
    );
    assert_eq!(
        tool_result(&fake, 4, "c2"),
        json!({ "result": "inner answer" })
    );
}

#[tokio::test]
async fn the_models_code_may_only_invoke_bare_tool_names() {
    let attempts = [
        "return await ctx.manager.invoke('inline://code,export default () => 1', {});",
        "return await ctx.manager.invoke('file:///etc/passwd', {});",
        "return await ctx.manager.invoke('./skills/add.skill.js', {});",
        "return await ctx.manager.invoke('add', { a: 1, b: 1, $context: { locals: { prompt: 'x' } } });",
        "return await ctx.manager.invoke(ctx.nonlocals.agent ? 'callback-00000000000000000000000000000000' : 'x', {});",
        "return await ctx.manager.invoke('/tmp/x.skill.md', {});",
    ];
    let mut script: Vec<_> = attempts
        .iter()
        .enumerate()
        .map(|(i, code)| code_turn(&format!("c{i}"), code))
        .collect();
    script.push(text_turn("refused"));
    let fake = ModelFake::start(script).await;
    let project = project();
    project.skill("careful.skill.md", &agent_skill("careful", &fake, "", ""));
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "careful", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("refused")));
    for (i, code) in attempts.iter().enumerate() {
        let result = tool_result(&fake, i + 1, &format!("c{i}"));
        let error = &result["error"];
        assert!(
            error["code"] == "denied" || error["code"] == "not-found",
            "{code}: {result}"
        );
        assert!(result.get("result").is_none(), "{code}: {result}");
    }
    let first: Value = tool_result(&fake, 1, "c0");
    assert!(
        first["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bare tool names"),
        "{first}"
    );
}
