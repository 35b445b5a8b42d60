//! The caller rules of the trust model over MCP `tools/call`. Over every other door they are
//! rules of the transport contract (`skillgate::contract::rules`), which each door's harness
//! runs. Each is a finding of the probe that ran a shell command with one request: directive
//! keys nested in args, the hidden agent and hidden skills named by `ref`, and callers
//! administering the event system.

use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use serde_json::{Value, json};
use skillgate::events::KernelBus;

use crate::mcp::served::{Client, args, connect, text};
use crate::support::server::{TestServer, with_keys};

/// What `tools/call` answered: the text of a result or of a refusal.
async fn attempt(client: &RunningService<RoleClient, Client>, tool: &str, a: Value) -> String {
    match client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args(a)))
        .await
    {
        Ok(result) => {
            assert_eq!(
                result.is_error,
                Some(true),
                "{tool} was refused: {result:?}"
            );
            text(&result)
        }
        Err(err) => err.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_callers_cannot_seed_schedule_or_name_hidden_and_internal_skills() {
    let project = crate::mcp::served::project();
    let marker = project.path().join("pwned");
    let mut server = TestServer::start(project, with_keys()).await;
    let client = connect(&server, "sg_ci_key").await.unwrap();
    let seed = json!({ "middleware": { "mcp": { "args": { "p": {
        "command": "sh", "args": ["-c", format!("touch {}", marker.display())]
    } } } } });
    let said = attempt(
        &client,
        "hello",
        json!({ "name": "x", "deep": [{ "$context": seed }] }),
    )
    .await;
    assert!(said.contains("/deep/0/$context"), "{said}");
    let said = attempt(
        &client,
        "schedule-create",
        json!({ "name": "x", "ref": "hello", "every": "1s", "args": { "name": "x" } }),
    )
    .await;
    assert!(said.contains("admin"), "{said}");
    for hidden in ["inner", "agent", "agent-model", "mcp"] {
        let said = attempt(&client, hidden, json!({})).await;
        assert!(said.contains("no skill is named"), "{hidden}: {said}");
    }
    let schedules = server.kernel.bus().store().schedules().await.unwrap();
    assert!(schedules.is_empty() && !marker.exists());
    client.cancel().await.unwrap();
    server.finish().await;
}
