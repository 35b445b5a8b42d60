//! DNS rebinding: a page on `evil.example` whose name was made to resolve to 127.0.0.1 reaches
//! a server bound to loopback with `Host: evil.example` and a matching `Origin`. Such a request
//! is not served (421) on `/invoke`, `/mcp` and `/ws`, while loopback names are; and `/mcp`
//! refuses a cross-site browser request as `/invoke` does.

use serde_json::json;

use crate::support::server::{TestServer, config, hello_and_admin, problem};

/// What the server answers to `method path` sent with `headers`.
async fn send(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, String)],
    body: Option<serde_json::Value>,
) -> reqwest::Response {
    let mut request = server.client.request(method, server.url(path));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

fn mcp_initialize() -> serde_json::Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": { "name": "probe", "version": "1" } } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_host_name_is_not_served_on_loopback_through_any_door() {
    let server = TestServer::start(hello_and_admin(), config()).await;
    let port = server.addr.port();
    let evil = [
        ("host", format!("evil.example:{port}")),
        ("origin", format!("http://evil.example:{port}")),
    ];
    let mcp_headers = |host: &[(&'static str, String)]| {
        let mut h = host.to_vec();
        h.push(("accept", "application/json, text/event-stream".into()));
        h
    };
    let ws_headers = |host: &[(&'static str, String)]| {
        let mut h = host.to_vec();
        h.extend([
            ("connection", "Upgrade".into()),
            ("upgrade", "websocket".into()),
            ("sec-websocket-version", "13".into()),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==".into()),
        ]);
        h
    };

    let invoke = send(
        &server,
        reqwest::Method::POST,
        "/invoke/hello",
        &evil,
        Some(json!({})),
    )
    .await;
    problem(invoke, 421).await;
    let mcp = send(
        &server,
        reqwest::Method::POST,
        "/mcp",
        &mcp_headers(&evil),
        Some(mcp_initialize()),
    )
    .await;
    problem(mcp, 421).await;
    let ws = send(
        &server,
        reqwest::Method::GET,
        "/ws",
        &ws_headers(&evil),
        None,
    )
    .await;
    assert_eq!(ws.status(), 421);

    // The same requests by a loopback name are served.
    let local = [
        ("host", format!("localhost:{port}")),
        ("origin", format!("http://localhost:{port}")),
    ];
    let invoke = send(
        &server,
        reqwest::Method::POST,
        "/invoke/hello",
        &local,
        Some(json!({})),
    )
    .await;
    assert_eq!(invoke.status(), 200);
    let mcp = send(
        &server,
        reqwest::Method::POST,
        "/mcp",
        &mcp_headers(&local),
        Some(mcp_initialize()),
    )
    .await;
    assert_eq!(mcp.status(), 200);
    let ws = send(
        &server,
        reqwest::Method::GET,
        "/ws",
        &ws_headers(&local),
        None,
    )
    .await;
    assert_eq!(ws.status(), 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_refuses_a_cross_site_browser_request_as_invoke_does() {
    let server = TestServer::start(hello_and_admin(), config()).await;
    let cross = [
        ("sec-fetch-site", "cross-site".to_string()),
        ("accept", "application/json, text/event-stream".to_string()),
    ];
    let mcp = send(
        &server,
        reqwest::Method::POST,
        "/mcp",
        &cross,
        Some(mcp_initialize()),
    )
    .await;
    let body = problem(mcp, 403).await;
    assert!(
        body["detail"].as_str().unwrap().contains("another site"),
        "{body}"
    );
    let invoke = send(
        &server,
        reqwest::Method::POST,
        "/invoke/hello",
        &cross,
        Some(json!({})),
    )
    .await;
    problem(invoke, 403).await;
}
