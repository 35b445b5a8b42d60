//! The loop: a tool call runs JavaScript in the sandbox, its result goes back to the model,
//! the model's answer is the skill's result; memory persists across turns; the trace and the
//! events tell what happened.

use serde_json::{Value, json};

use super::*;
use crate::support::model_fake::{ModelFake, Reply, openai_text};

#[tokio::test]
async fn a_tool_call_runs_code_whose_result_goes_back_to_the_model_before_its_answer() {
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "return await ctx.manager.invoke('add', { a: 2, b: 3 });",
        ),
        text_turn("The sum is 5."),
    ])
    .await;
    let project = Project::new();
    project.skill("add.skill.js", ADD);
    project.skill(
        "summer.skill.md",
        &agent_skill("summer", &fake, "  allowed-tools: add\n", ""),
    );
    let probe = Probe::default();
    let kernel = kernel(&project, &probe);

    let out = run(&kernel, "summer", json!({ "who": "Ada" }))
        .await
        .unwrap();
    assert_eq!(out, Some(json!("The sum is 5.")));

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0].body;
    assert_eq!(first["model"], "fake-1");
    assert_eq!(first["tools"][0]["function"]["name"], "invoke");
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("Do the task for Ada."), "{system}");
    assert!(
        system.contains("### add"),
        "the tool is documented: {first}"
    );
    assert!(
        first["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("\"who\":\"Ada\""),
        "the user message carries the args"
    );
    assert_eq!(tool_result(&fake, 1, "c1"), json!({ "result": 5 }));

    let kinds = probe.kinds();
    assert_eq!(
        kinds,
        [
            "turn-start",
            "tool-call",
            "tool-result",
            "turn-end",
            "turn-start",
            "message",
            "turn-end"
        ],
        "{:?}",
        probe.trace()
    );
    let deltas = probe.trace().iter().filter(|e| e["delta"] == true).count();
    assert!(deltas >= 1, "streamed text reaches the trace as deltas");
    assert!(
        probe
            .trace()
            .iter()
            .all(|e| e["timestamp"].as_u64().is_some())
    );
}

#[tokio::test]
async fn code_that_finishes_ends_the_run_with_its_value_without_another_model_call() {
    let fake = ModelFake::start(vec![code_turn(
        "c1",
        "ctx.manager.finish({ total: await ctx.manager.invoke('add', { a: 1, b: 1 }) });",
    )])
    .await;
    let project = Project::new();
    project.skill("add.skill.js", ADD);
    project.skill("finisher.skill.md", &agent_skill("finisher", &fake, "", ""));
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "finisher", json!({})).await.unwrap();
    assert_eq!(out, Some(json!({ "total": 2 })));
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn memory_persists_across_turns_and_is_seeded_by_the_caller() {
    let fake = ModelFake::start(vec![
        code_turn("c1", "memory.count = (memory.count ?? 0) + 1; memory.seen = memory.seed; return memory.count;"),
        code_turn("c2", "memory.count += 1; return { count: memory.count, seed: memory.seen };"),
        text_turn("done"),
    ])
    .await;
    let project = Project::new();
    let kernel = kernel(&project, &Probe::default());
    let out = kernel
        .invoke(
            "agent",
            json!({
                "prompt": "p",
                "config": { "model": "openai/fake-1", "base-url": fake.base() },
                "memory": { "seed": "from the caller" },
            }),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.as_deref(), Some(&json!("done")));
    assert_eq!(tool_result(&fake, 1, "c1"), json!({ "result": 1 }));
    assert_eq!(
        tool_result(&fake, 2, "c2"),
        json!({ "result": { "count": 2, "seed": "from the caller" } })
    );
}

#[tokio::test]
async fn errors_and_console_output_of_the_code_reach_the_model() {
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "console.log('looking', 42); throw new Error('no such row');",
        ),
        text_turn("I could not find it."),
    ])
    .await;
    let project = Project::new();
    project.skill("seeker.skill.md", &agent_skill("seeker", &fake, "", ""));
    let probe = Probe::default();
    let kernel = kernel(&project, &probe);
    let out = run(&kernel, "seeker", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("I could not find it.")));
    let result = tool_result(&fake, 1, "c1");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no such row"),
        "{result}"
    );
    assert_eq!(result["logs"], "looking 42");
    let errors: Vec<Value> = probe
        .trace()
        .into_iter()
        .filter(|e| e["type"] == "tool-result")
        .collect();
    assert!(
        errors[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no such row")
    );
}

#[tokio::test]
async fn agent_events_reach_the_topic_the_caller_names_in_order() {
    let fake = ModelFake::start(vec![code_turn("c1", "return 1 + 1;"), text_turn("two")]).await;
    let project = Project::new();
    let kernel = kernel(&project, &Probe::default());
    let bus = kernel
        .extension::<skillgate::events::Bus>()
        .unwrap()
        .clone();
    let mut watch = bus.watch();
    kernel
        .invoke(
            "agent",
            json!({
                "prompt": "p",
                "config": { "model": "openai/fake-1", "base-url": fake.base() },
                "events": "agent-progress",
            }),
            InvokeOptions::default(),
        )
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while let Ok(event) = watch.try_recv() {
        if event.topic == "agent-progress" {
            let delta = event.data.as_ref().and_then(|d| d.get("delta")).is_some();
            if !delta {
                kinds.push(event.kind.clone());
            }
        }
    }
    assert_eq!(
        kinds,
        [
            "agent-start",
            "turn-start",
            "tool-call",
            "tool-result",
            "turn-end",
            "turn-start",
            "agent-message",
            "turn-end",
            "agent-complete"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skillgate_run_streams_tokens_on_a_terminal_and_prints_only_the_result_on_stdout() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: `script` (util-linux) is not installed to give the run a terminal");
        return;
    }
    let answer = "Streaming works.";
    let fake = ModelFake::start(vec![
        Reply::Stream(openai_text(&["Streaming ", "works."], 5, 2)),
        Reply::Stream(openai_text(&["Streaming ", "works."], 5, 2)),
    ])
    .await;
    let project = Project::new();
    project.skill("talker.skill.md", &agent_skill("talker", &fake, "", ""));
    let bin = env!("CARGO_BIN_EXE_skillgate");
    let dir = project.path().to_path_buf();

    // A terminal: `script` runs the command on a pseudo-terminal (stdout and stderr both).
    let shell = format!("{bin} --project {} run talker", dir.display());
    let tty = tokio::task::spawn_blocking(move || {
        std::process::Command::new("script")
            .args(["-qec", &shell, "/dev/null"])
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let seen = String::from_utf8_lossy(&tty.stdout).to_string();
    assert!(tty.status.success(), "{seen}");
    assert_eq!(
        seen.matches(answer).count(),
        2,
        "streamed once, printed once: {seen:?}"
    );

    // Not a terminal: stdout is the result alone and nothing is streamed.
    let plain = tokio::task::spawn_blocking(move || {
        crate::support::common::skillgate(&dir, &["run", "talker"])
    })
    .await
    .unwrap();
    assert_eq!(crate::support::common::stdout(&plain).trim(), answer);
    assert!(!crate::support::common::stderr(&plain).contains(answer));
}

#[tokio::test]
async fn a_model_in_the_main_skill_is_the_project_default() {
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "return await ctx.manager.invoke('add', { a: 20, b: 22 });",
        ),
        text_turn("42"),
    ])
    .await;
    let project = Project::new();
    project.write(
        "main.skill.md",
        &format!(
            "---\nname: main\ndescription: The project.\nmetadata:\n  role: main\n  model:\n    model: openai/fake-1\n    base-url: {}\n---\n",
            fake.base()
        ),
    );
    project.skill("add.skill.js", ADD);
    project.skill(
        "plain.skill.md",
        "---\nname: plain\ndescription: No model of its own.\nallowed-tools: add\n---\nAdd the numbers.\n",
    );
    let kernel = kernel(&project, &Probe::default());
    let out = run(&kernel, "plain", json!({})).await.unwrap();
    assert_eq!(out, Some(json!("42")));
    let system = fake.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains("### add"),
        "top-level allowed-tools constrain: {system}"
    );
}

#[tokio::test]
async fn an_sse_client_sees_the_tokens_the_tool_calls_and_the_result_as_they_happen() {
    use crate::support::server::{TestServer, config};
    let fake = ModelFake::start(vec![
        code_turn(
            "c1",
            "return await ctx.manager.invoke('add', { a: 2, b: 2 });",
        ),
        Reply::Stream(openai_text(&["It is ", "four."], 10, 5)),
    ])
    .await;
    let project = Project::new();
    project.skill("add.skill.js", ADD);
    project.skill(
        "counter.skill.md",
        &agent_skill("counter", &fake, "  allowed-tools: add\n", ""),
    );
    let mut server = TestServer::start(project, config()).await;
    let mut events = server.stream("/invoke/counter", &json!({})).await;
    let mut got = Vec::new();
    while let Some(event) = events.next().await {
        got.push(event);
    }
    let order: Vec<String> = got
        .iter()
        .map(|e| match e.event.as_str() {
            "event" => e.data["type"].as_str().unwrap_or_default().to_string(),
            other => other.to_string(),
        })
        .collect();
    let at = |name: &str| {
        order
            .iter()
            .position(|o| o == name)
            .unwrap_or_else(|| panic!("{name} in {order:?}"))
    };
    assert!(at("tool-call") < at("tool-result"), "{order:?}");
    assert!(at("tool-result") < at("chunk"), "{order:?}");
    let chunks: String = got
        .iter()
        .filter(|e| e.event == "chunk")
        .map(|e| e.data.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(chunks, "It is four.");
    let result = got
        .iter()
        .find(|e| e.event == "tool-result")
        .map(|e| e.data.clone());
    assert!(result.is_none(), "tool results travel as agent events");
    let tool_result = got
        .iter()
        .find(|e| e.event == "event" && e.data["type"] == "tool-result")
        .unwrap();
    assert_eq!(tool_result.data["data"]["result"], json!({ "result": 4 }));
    assert_eq!(got.last().unwrap().event, "result");
    assert_eq!(got.last().unwrap().data, json!({ "result": "It is four." }));
    server.finish().await;
}

#[tokio::test]
async fn a_tool_call_the_hook_denies_is_not_run_and_the_model_is_told_why() {
    let fake = ModelFake::start(vec![
        code_turn("c1", "return 'ran';"),
        text_turn("understood"),
    ])
    .await;
    let project = Project::new();
    // The code would run through `runner`; the hook denies every tool call.
    project.skill(
        "runner.skill.js",
        "export const frontmatter = { name: 'runner' };\nexport default async () => { throw new Error('the denied code ran'); };\n",
    );
    project.skill(
        "denier.skill.js",
        "export const frontmatter = { name: 'denier' };\nexport default async (ctx, args) => args.type === 'tool-call' ? { deny: 'no code today' } : undefined;\n",
    );
    let kernel = kernel(&project, &Probe::default());
    let out = kernel
        .invoke(
            "agent-model",
            json!({
                "prompt": "p",
                "config": { "model": "openai/fake-1", "base-url": fake.base(), "retries": 0 },
                "invokeRef": "runner",
                "hookRef": "denier",
                "userMessage": "go",
                "skillName": "task",
            }),
            InvokeOptions::default(),
        )
        .await
        .unwrap()
        .map(|v| (*v).clone());
    assert_eq!(out, Some(json!("understood")));
    let sent_back = tool_result(&fake, 1, "c1");
    assert_eq!(
        sent_back,
        json!({ "error": { "message": "denied: no code today" } })
    );
}

#[tokio::test]
async fn nonlocals_agent_is_set_on_the_served_skills_context() {
    let fake = ModelFake::start(vec![text_turn("done")]).await;
    let project = Project::new();
    project.skill("task.skill.md", &agent_skill("task", &fake, "", ""));
    // A middleware of the served skill reads its own context's nonlocals after the agent ran.
    let seen: std::sync::Arc<parking_lot::Mutex<Option<Value>>> = Default::default();
    let kernel = {
        let seen = seen.clone();
        project
            .builder()
            .native(skillgate::middleware::native(
                "name: look\nmetadata:\n  role: middleware\n  visibility: hidden\n",
                move |ctx, _args| {
                    let seen = seen.clone();
                    async move {
                        let target = ctx.ctx_target()?;
                        let out = target.next().await;
                        *seen.lock() = Some(json!({
                            "agent": target.get("nonlocals.agent")?,
                            "id": target.id(),
                        }));
                        out?;
                        Ok(None)
                    }
                },
            ))
            .build()
    };
    let mut args = json!({});
    args["$context"] = json!({ "locals": { "middleware": [{ "name": "look" }] } });
    kernel
        .invoke("task", args, InvokeOptions::default())
        .await
        .unwrap();
    let seen = seen.lock().clone().expect("the middleware ran");
    let agent = &seen["agent"];
    assert_eq!(agent["contextId"], seen["id"], "{seen}");
    assert!(agent.get("ancestorContextId").is_some(), "{seen}");
    assert_eq!(agent["turnIndex"], 0, "{seen}");
}
