//! One client cannot take every run slot: the runs at once (`--max-runs`) and the bytes of
//! their args (`--max-args-in-flight`) keep their last eighth for clients running fewer than
//! two invocations, so a client (here 127.0.0.2) holding long runs from many requests or
//! sockets is refused before it fills them, and another client's request still runs. Over
//! HTTP and WebSocket, the doors the hostile load test found it on; MCP, the project's web
//! routes and the console's try-it form count against the same client's share.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillgate::gateway::http::HttpConfig;
use tokio::sync::Semaphore;

use crate::support::common::{Project, native};
use crate::support::server::{TestServer, config, problem, with_keys};
use crate::support::ws_client::WsClient;

const GREEDY: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const ELSEWHERE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

/// `hold`: runs until `gate` gives it a permit.
fn hold(gate: Arc<Semaphore>) -> skillgate::skills::tool::Tool {
    native(
        "name: hold\ndescription: Runs until the test lets it end.\n",
        move |_ctx: skillgate::Context, _args| {
            let gate = gate.clone();
            async move {
                gate.acquire().await.unwrap().forget();
                Ok(Some(json!("held")))
            }
        },
    )
}

/// A server of `project` on `settings` taking 8 runs at once (its reserve: the last one),
/// with `hold` on `gate`.
async fn server(project: Project, mut settings: HttpConfig, gate: &Arc<Semaphore>) -> TestServer {
    settings.max_runs = 8;
    let gate = gate.clone();
    TestServer::start_with(project, settings, move |b| b.native(hold(gate))).await
}

/// Seven `hold` runs over `/invoke` from the test's own address (with `key` as bearer, if
/// any), in the background, once all seven are going.
async fn seven_runs(
    server: &TestServer,
    key: Option<&'static str>,
) -> Vec<tokio::task::JoinHandle<reqwest::Response>> {
    let held = (0..7)
        .map(|_| invoke(&server.client, server.addr, key))
        .collect();
    runs_until(server, 7).await;
    held
}

/// Waits until `n` runs are going.
async fn runs_until(server: &TestServer, n: usize) {
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        while server.gateway.runs_now() != n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{} runs going, not {n}",
        server.gateway.runs_now()
    );
}

/// An HTTP client whose connections come from `from`.
fn client_from(from: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from)
        .build()
        .unwrap()
}

/// Invokes `hold` from `client` (with `key` as bearer, if any), in the background.
fn invoke(
    client: &reqwest::Client,
    server: SocketAddr,
    key: Option<&'static str>,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let mut request = client
        .post(format!("http://{server}/invoke/hold"))
        .json(&json!({}));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    tokio::spawn(async move { request.send().await.unwrap() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_client_holding_runs_is_refused_the_last_slots_which_another_client_gets() {
    let gate = Arc::new(Semaphore::new(0));
    let server = server(Project::new(), config(), &gate).await;
    let greedy = client_from(GREEDY);
    // The greedy client starts runs one by one until it is refused.
    let mut held = Vec::new();
    let refused = loop {
        let call = invoke(&greedy, server.addr, None);
        let started = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if call.is_finished() || server.gateway.runs_now() > held.len() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(started.is_ok(), "the run started or was answered");
        if call.is_finished() {
            break call.await.unwrap();
        }
        held.push(call);
        assert!(held.len() < 8, "refused before it holds every slot");
    };
    assert_eq!(held.len(), 7, "it runs all but the reserve");
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = problem(refused, 503).await;
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("nearly full"), "{body}");
    assert!(detail.contains("already runs 7"), "{body}");

    // Another client's request runs in the reserve.
    let other = invoke(&server.client, server.addr, None);
    runs_until(&server, 8).await;
    gate.add_permits(8);
    let answered = other.await.unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.json::<Value>().await.unwrap()["result"], "held");
    for call in held {
        assert_eq!(call.await.unwrap().status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_a_client_holding_runs_is_refused_the_last_slots_which_another_client_gets()
{
    let gate = Arc::new(Semaphore::new(0));
    let server = server(Project::new(), config(), &gate).await;
    // The greedy client sends eight invocations on one socket.
    let (mut greedy, _) = WsClient::connect_from(GREEDY, server.addr).await;
    for i in 0..8 {
        greedy
            .send(json!({ "type": "invoke", "id": format!("g{i}"), "skill": "hold", "args": {} }))
            .await;
    }
    // Seven run; the eighth is refused as busy.
    let refused = greedy
        .until(|frame| frame["type"] == "error" && frame["id"] == "g7")
        .await;
    let error = refused.last().unwrap();
    assert_eq!(error["problem"]["status"], 503, "{error}");
    let detail = error["problem"]["detail"].as_str().unwrap();
    assert!(detail.contains("nearly full"), "{error}");
    assert!(detail.contains("already runs 7"), "{error}");
    runs_until(&server, 7).await;

    // Another client's invocation runs in the reserve.
    let (mut other, _) = WsClient::connect(server.addr, None).await;
    other
        .send(json!({ "type": "invoke", "id": "o", "skill": "hold", "args": {} }))
        .await;
    runs_until(&server, 8).await;
    gate.add_permits(8);
    let answer = other.answer("o").await;
    assert_eq!(answer.last().unwrap()["value"], "held", "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mcp_a_call_counts_against_its_clients_share_with_its_other_doors() {
    use rmcp::model::CallToolRequestParams;

    let gate = Arc::new(Semaphore::new(0));
    let server = server(Project::new(), with_keys(), &gate).await;
    // This address runs seven invocations over HTTP ...
    let held = seven_runs(&server, Some("sg_ci_key")).await;
    // ... so its MCP call, which would take the last slot, is refused as the same client's.
    let mcp = crate::mcp::served::connect(&server, "sg_ci_key")
        .await
        .unwrap();
    let refused = mcp
        .call_tool(CallToolRequestParams::new("hold"))
        .await
        .expect("answered");
    assert_eq!(refused.is_error, Some(true));
    let text = crate::mcp::served::text(&refused);
    assert!(text.contains("nearly full"), "{text}");
    assert!(text.contains("already runs 7"), "{text}");
    gate.add_permits(8);
    for call in held {
        assert_eq!(call.await.unwrap().status(), 200);
    }
    mcp.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_web_route_counts_against_its_clients_share_with_its_other_doors() {
    let gate = Arc::new(Semaphore::new(0));
    let project = Project::new();
    project.write(
        "main.skill.md",
        "---\nname: site\ndescription: The project.\nmetadata:\n  role: main\n  web:\n    routes:\n      - { method: POST, path: /hold, ref: hold }\n---\n",
    );
    let server = server(project, config(), &gate).await;
    // This address runs seven invocations over `/invoke` ...
    let held = seven_runs(&server, None).await;
    // ... so its request to the project's route, which would take the last slot, is refused as
    // the same client's.
    let refused = server.post_json("/hold", &json!({})).await;
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = problem(refused, 503).await;
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("already runs 7"), "{body}");
    // Another address's request to the route runs in the reserve.
    let other = client_from(ELSEWHERE)
        .post(server.url("/hold"))
        .json(&json!({}))
        .send();
    let other = tokio::spawn(other);
    runs_until(&server, 8).await;
    gate.add_permits(8);
    assert_eq!(other.await.unwrap().unwrap().status(), 200);
    for call in held {
        assert_eq!(call.await.unwrap().status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_try_it_form_counts_against_its_clients_share_with_its_other_doors() {
    use crate::console::support::{Visitor, csrf};

    let gate = Arc::new(Semaphore::new(0));
    let server = server(Project::new(), with_keys(), &gate).await;
    let mut visitor = Visitor::new(&server);
    visitor.log_in("sg_ci_key").await;
    let token = csrf(&visitor.page("/console/skills/hold").await);
    // This address runs seven invocations over `/invoke` ...
    let held = seven_runs(&server, Some("sg_ci_key")).await;
    // ... so trying a skill from the console, which would take the last slot, is refused as
    // the same client's.
    let refused = visitor
        .post(
            "/console/skills/hold/try",
            &[("csrf", &token), ("args", "{}")],
            &[],
        )
        .await;
    assert_eq!(refused.status(), 503);
    let page = refused.text().await.unwrap();
    assert!(page.contains("already runs 7"), "{page}");
    assert_eq!(server.gateway.runs_now(), 7, "the refused try never ran");
    gate.add_permits(8);
    for call in held {
        assert_eq!(call.await.unwrap().status(), 200);
    }
}
