//! API keys, key scopes, public paths, the body limit, the rate limit, CORS and the header
//! timeout, over HTTP.

use std::time::Duration;

use serde_json::{Value, json};
use skillgate::gateway::keys::{ApiKey, KeyRing, hash_key};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::server::{TestServer, config, problem};
use crate::support::server::{hello_and_admin as project, with_keys};

#[tokio::test]
async fn without_a_key_a_protected_path_is_401_and_healthz_stays_public() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let response = server.post_json("/invoke/hello", &json!({})).await;
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer realm=\"skillgate\""
    );
    problem(response, 401).await;
    problem(server.get("/skills").await, 401).await;
    assert_eq!(server.get("/healthz").await.status(), 200);
    assert_eq!(server.get("/openapi.yaml").await.status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn a_wrong_key_is_401_and_a_valid_key_is_accepted() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let wrong = server
        .client
        .post(server.url("/invoke/hello"))
        .bearer_auth("sg_guess")
        .send()
        .await
        .unwrap();
    let body = problem(wrong, 401).await;
    assert!(body["detail"].as_str().unwrap().contains("not valid"));
    let right = server
        .client
        .post(server.url("/invoke/hello"))
        .bearer_auth("sg_ci_key")
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
    assert_eq!(right.json::<Value>().await.unwrap()["result"], "hi\n");
    server.finish().await;
}

#[tokio::test]
async fn a_skill_outside_a_keys_globs_gets_the_same_404_as_a_missing_one() {
    let mut server = TestServer::start(project(), with_keys()).await;
    let send = |skill: &str| {
        server
            .client
            .post(server.url(&format!("/invoke/{skill}")))
            .bearer_auth("sg_narrow_key")
            .send()
    };
    assert_eq!(send("hello").await.unwrap().status(), 200);
    let scoped = problem(send("admin").await.unwrap(), 404).await;
    let missing = problem(send("nothing-here").await.unwrap(), 404).await;
    assert_eq!(scoped["type"], missing["type"]);
    assert_eq!(scoped["title"], missing["title"]);
    assert!(scoped["detail"].as_str().unwrap().contains("`admin`"));
    server.finish().await;
}

#[tokio::test]
async fn public_paths_are_configurable() {
    let mut settings = with_keys();
    settings.public = vec!["/skills".into(), "/skills/*".into()];
    let mut server = TestServer::start(project(), settings).await;
    assert_eq!(server.get("/skills").await.status(), 200);
    assert_eq!(server.get("/skills/hello").await.status(), 200);
    // Not listed any more: the defaults are replaced, /healthz stays.
    problem(server.get("/readyz").await, 401).await;
    assert_eq!(server.get("/healthz").await.status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let mut settings = config();
    settings.body_limit = 64;
    let mut server = TestServer::start(project(), settings).await;
    let big = json!({ "text": "x".repeat(200) });
    let body = problem(server.post_json("/invoke/hello", &big).await, 413).await;
    assert_eq!(body["limit"], 64);
    server.finish().await;
}

#[tokio::test]
async fn past_the_rate_limit_a_key_gets_429_with_retry_after_and_other_keys_do_not() {
    let mut settings = with_keys();
    settings.rate_per_second = 1;
    settings.rate_burst = 2;
    let mut server = TestServer::start(project(), settings).await;
    let send = |key: &'static str| {
        server
            .client
            .post(server.url("/invoke/hello"))
            .bearer_auth(key)
            .send()
    };
    assert_eq!(send("sg_ci_key").await.unwrap().status(), 200);
    assert_eq!(send("sg_ci_key").await.unwrap().status(), 200);
    let limited = send("sg_ci_key").await.unwrap();
    assert!(limited.headers().get("retry-after").is_some());
    problem(limited, 429).await;
    // The limit is per key.
    assert_eq!(send("sg_narrow_key").await.unwrap().status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn cors_answers_preflight_for_allowed_origins_only() {
    let mut settings = config();
    settings.cors_origins = vec!["https://app.example".into()];
    let mut server = TestServer::start(project(), settings).await;
    let preflight = |origin: &'static str| {
        server
            .client
            .request(reqwest::Method::OPTIONS, server.url("/invoke/hello"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, authorization",
            )
            .send()
    };
    let allowed = preflight("https://app.example").await.unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let refused = preflight("https://evil.example").await.unwrap();
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    server.finish().await;
}

#[test]
fn stored_key_hashes_must_be_sha256_hex() {
    let err = ApiKey::new("ci", "plaintext-key", vec![])
        .unwrap_err()
        .to_string();
    assert!(err.contains("sha256:"), "{err}");
    let err = ApiKey::new("ci", "sha256:abc", vec![])
        .unwrap_err()
        .to_string();
    assert!(err.contains("64 hex digits"), "{err}");
    assert!(ApiKey::new("ci", &hash_key("k"), vec![]).is_ok());
    let dup = KeyRing::new(vec![
        ApiKey::new("a", &hash_key("1"), vec![]).unwrap(),
        ApiKey::new("a", &hash_key("2"), vec![]).unwrap(),
    ]);
    assert!(
        dup.unwrap_err()
            .to_string()
            .contains("two API keys are named `a`")
    );
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected_after_the_header_timeout() {
    let mut settings = config();
    settings.header_timeout = Duration::from_millis(300);
    let mut server = TestServer::start(project(), settings).await;
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: skillgate\r\nx-partial: ")
        .await
        .unwrap();
    // The headers never end; the server must give up and close (hyper may answer 408 first).
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(15), slow.read_to_end(&mut answer))
        .await
        .expect("the server keeps a connection with unfinished headers open");
    closed.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "unexpected answer: {answer}"
    );
    // Clients that send whole requests are still served.
    assert_eq!(server.get("/healthz").await.status(), 200);
    server.finish().await;
}
