//! MCP out, with the official SDK's client (`rmcp`) speaking the published protocol: `/mcp`
//! over Streamable HTTP under the gateway's keys and policy, and `skillgate mcp` over stdio.

#[allow(deprecated)] // logging notifications are what skillgate sends today
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::common::Project;
use crate::support::record::Record;
use crate::support::server::{TestServer, with_keys};

/// A client that keeps the notifications it gets.
#[derive(Clone, Default)]
pub(crate) struct Client(Record);

impl ClientHandler for Client {
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.push(params.data);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.push(json!({ "toolListChanged": true }));
    }
}

pub(crate) fn project() -> Project {
    let p = Project::new();
    p.skill(
        "hello.skill.md",
        "---\nname: hello\ndescription: Greets someone.\nmetadata:\n  params: { type: object, properties: { name: { type: string } }, required: [name] }\n---\nHello, :arg[name]!",
    )
    .skill(
        "inner.skill.md",
        "---\nname: inner\nmetadata:\n  visibility: hidden\n---\nsecret",
    )
    .skill(
        "boom.skill.js",
        "export const frontmatter = { description: 'Fails.' };\nexport default async () => { throw new Error('db password is hunter2'); };\n",
    )
    .skill(
        "steps.skill.js",
        "export const frontmatter = { description: 'Works in steps.', metadata: { params: { type: 'object', properties: { n: { type: 'integer' } } } } };\n\
         export default async (ctx, args) => {\n\
           for (let i = 1; i <= args.n; i++) await ctx.manager.invoke('event-emit', { topic: 'steps', data: { step: i } });\n\
           return { steps: args.n };\n\
         };\n",
    );
    p
}

pub(crate) async fn connect(
    server: &TestServer,
    key: &str,
) -> Result<RunningService<RoleClient, Client>, String> {
    skillgate::tls::install();
    let config = StreamableHttpClientTransportConfig::with_uri(server.url("/mcp")).auth_header(key);
    Client::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| e.to_string())
}

pub(crate) fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("an object"),
    }
}

async fn call(client: &RunningService<RoleClient, Client>, tool: &str, a: Value) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args(a)))
        .await
        .expect("the call is answered")
}

/// The notifications the client has handled once `done` holds of them (the client handles a
/// notification on its own task, so the last ones may land just after the call's answer).
async fn notifications_until(
    client: &RunningService<RoleClient, Client>,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    client.service().0.until(done).await
}

async fn tool_names(client: &RunningService<RoleClient, Client>) -> Vec<String> {
    let tools = client.list_all_tools().await.expect("tools listed");
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

pub(crate) fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_lists_the_skills_a_key_may_reach_with_their_params_schemas() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let client = connect(&server, "sg_ci_key").await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"hello") && names.contains(&"steps") && names.contains(&"boom"),
        "{names:?}"
    );
    assert!(!names.contains(&"inner"), "hidden skills are not listed");
    assert!(
        !names
            .iter()
            .any(|n| *n == "execute" || *n == "directives" || *n == "session"),
        "{names:?}"
    );
    let hello = tools.iter().find(|t| t.name == "hello").unwrap();
    assert_eq!(hello.description.as_deref(), Some("Greets someone."));
    assert_eq!(hello.input_schema["type"], "object");
    assert_eq!(hello.input_schema["required"], json!(["name"]));
    assert_eq!(hello.input_schema["properties"]["name"]["type"], "string");
    client.cancel().await.unwrap();

    let narrow = connect(&server, "sg_narrow_key").await.unwrap();
    let names = tool_names(&narrow).await;
    assert_eq!(names, ["hello"], "a key scoped to hel* sees only those");
    let refused = narrow
        .call_tool(CallToolRequestParams::new("steps").with_arguments(args(json!({"n": 1}))))
        .await
        .unwrap_err();
    // Out of its grants looks like missing.
    assert!(
        refused.to_string().contains("no skill is named `steps`"),
        "{refused}"
    );
    narrow.cancel().await.unwrap();

    let without = connect(&server, "sg_wrong_key").await;
    assert!(without.is_err(), "a wrong key gets no session");
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_calls_run_the_skill_and_failures_are_tool_errors_without_server_secrets() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let client = connect(&server, "sg_ci_key").await.unwrap();
    let out = call(&client, "hello", json!({"name": "Ada"})).await;
    assert_eq!(out.is_error, Some(false));
    assert_eq!(text(&out), "Hello, Ada!");

    let bad = call(&client, "hello", json!({})).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        text(&bad).contains("name"),
        "the args mistake is named: {}",
        text(&bad)
    );

    let boom = call(&client, "boom", json!({})).await;
    assert_eq!(boom.is_error, Some(true));
    assert!(!text(&boom).contains("hunter2"), "{}", text(&boom));

    let unknown = client
        .call_tool(CallToolRequestParams::new("inner"))
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("no skill is named `inner`"),
        "hidden is unknown: {unknown}"
    );
    client.cancel().await.unwrap();
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_of_a_call_reach_the_client_as_notifications_while_it_runs() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let client = connect(&server, "sg_ci_key").await.unwrap();
    let out = call(&client, "steps", json!({"n": 3})).await;
    assert_eq!(out.structured_content, Some(json!({"steps": 3})));
    let seen = notifications_until(&client, |seen| {
        seen.iter()
            .any(|n| n["event"]["topic"] == "steps" && n["event"]["data"]["step"] == 3)
    })
    .await;
    let steps: Vec<Value> = seen
        .iter()
        .filter(|n| n["event"]["topic"] == "steps")
        .map(|n| n["event"]["data"]["step"].clone())
        .collect();
    // The SDK's client runs each notification's handler on its own task, so the order they
    // land in here is not the order on the wire: compare them sorted.
    let mut steps: Vec<u64> = steps.iter().filter_map(Value::as_u64).collect();
    steps.sort_unstable();
    assert_eq!(steps, [1, 2, 3], "{seen:?}");
    client.cancel().await.unwrap();
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_called_over_mcp_streams_its_agent_events() {
    use crate::agent::{agent_skill, text_turn};
    use crate::support::model_fake::ModelFake;
    let fake = ModelFake::start(vec![text_turn("Done for Ada.")]).await;
    let p = project();
    p.skill("helper.skill.md", &agent_skill("helper", &fake, "", ""));
    let mut server = TestServer::start(p, with_keys()).await;
    let client = connect(&server, "sg_ci_key").await.unwrap();
    let out = call(&client, "helper", json!({"who": "Ada"})).await;
    assert_eq!(text(&out), "Done for Ada.");
    let seen = notifications_until(&client, |seen| {
        seen.iter().any(|n| n["event"]["type"] == "agent-complete")
    })
    .await;
    let types: Vec<&str> = seen
        .iter()
        .filter(|n| n["event"]["topic"] == "agent")
        .filter_map(|n| n["event"]["type"].as_str())
        .collect();
    // Handled on a task each by the client: which arrived, not in which order.
    for kind in [
        "agent-start",
        "turn-start",
        "agent-message",
        "turn-end",
        "agent-complete",
    ] {
        assert!(types.contains(&kind), "{kind} in {types:?}");
    }
    client.cancel().await.unwrap();
    server.finish().await;
}

/// `skillgate mcp` on project `p`, started as a desktop client starts it, with a session.
async fn stdio_client(p: &Project) -> RunningService<RoleClient, Client> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_skillgate"));
    command
        .arg("--project")
        .arg(p.path())
        .arg("--store")
        .arg("memory")
        .arg("mcp")
        .env_remove("RUST_LOG")
        .env_remove("DATABASE_URL");
    Client::default()
        .serve(TokioChildProcess::new(command).unwrap())
        .await
        .expect("the stdio server starts a session")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skillgate_mcp_serves_the_skills_over_stdio() {
    let p = project();
    let client = stdio_client(&p).await;
    let names = tool_names(&client).await;
    for name in ["boom", "hello", "steps"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(!names.iter().any(|n| n == "inner"), "{names:?}");
    let out = call(&client, "hello", json!({"name": "Grace"})).await;
    assert_eq!(text(&out), "Hello, Grace!");
    let out = call(&client, "steps", json!({"n": 2})).await;
    assert_eq!(out.structured_content, Some(json!({"steps": 2})));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_is_listed_only_to_an_admin_key_over_mcp_and_http() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let control = ["schedule-create", "schedule-list", "event-subscribe"];
    for (key, admin) in [("sg_ci_key", false), ("sg_ops_key", true)] {
        let client = connect(&server, key).await.unwrap();
        let names = tool_names(&client).await;
        client.cancel().await.unwrap();
        let listed: Value = server.get_as(key, "/skills").await.json().await.unwrap();
        let http: Vec<String> = listed["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        for tool in control {
            assert_eq!(
                names.iter().any(|n| n == tool),
                admin,
                "{key} over MCP: {names:?}"
            );
            assert_eq!(
                http.iter().any(|n| n == tool),
                admin,
                "{key} on /skills: {http:?}"
            );
        }
        assert!(names.iter().any(|n| n == "hello"), "{names:?}");
    }
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_over_stdio_is_told_when_an_edit_changes_the_skills() {
    let p = project();
    let client = stdio_client(&p).await;
    assert!(!tool_names(&client).await.contains(&"added".to_string()));
    p.skill(
        "added.skill.md",
        "---\nname: added\ndescription: New.\n---\nI am new.\n",
    );
    client
        .service()
        .0
        .until(|seen| seen.iter().any(|n| n["toolListChanged"] == true))
        .await;
    assert!(tool_names(&client).await.contains(&"added".to_string()));
    client.cancel().await.unwrap();
}
