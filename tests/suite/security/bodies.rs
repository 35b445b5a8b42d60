//! HTTP request bodies being received: a body over 16 KiB is read only once a budget every
//! connection shares holds it, and one client address holds at most its share of that budget,
//! so clients that dribble bodies in can make the server hold neither one body limit per
//! connection (1,000 connections each holding all but 100 bytes of a 1 MB body took the server
//! from 25 MB to 1,009 MB without the budget, 89 MB with it) nor the whole budget. Small bodies
//! never wait.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::common::Project;
use crate::support::server::{TestServer, config};

fn echo() -> Project {
    let p = Project::new();
    p.skill(
        "echo.skill.js",
        "/*---\nname: echo\ndescription: Gives its args back.\n---*/\nexport default async function (ctx, args) { return args; }\n",
    );
    p
}

const HELD: &str = "skillgate_http_body_receive_bytes";
const WAITING: &str = "skillgate_http_body_receive_waiting";

/// A connection to `server` from the local address `from`.
async fn connect_from(from: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(server).await.unwrap()
}

/// The head of an invocation of `echo` whose body has `len` bytes.
fn head(len: usize) -> String {
    format!(
        "POST /invoke/echo HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// From `from`: an invocation announcing a `len`-byte body, of which 1 KiB is sent, then
/// nothing more.
async fn dribbler(from: &str, server: SocketAddr, len: usize) -> TcpStream {
    let mut s = connect_from(from, server).await;
    s.write_all(head(len).as_bytes()).await.unwrap();
    s.write_all(&[b' '; 1024]).await.unwrap();
    s
}

/// From `from`: a whole invocation of `echo` with `payload`, its answer not read yet.
async fn invoke_from(from: &str, server: SocketAddr, payload: &str) -> TcpStream {
    let body = json!({ "p": payload }).to_string();
    let mut s = connect_from(from, server).await;
    s.write_all(head(body.len()).as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    s
}

/// The answer on `s`: its status and JSON body (`None` while none comes within `wait`).
async fn answer(s: &mut TcpStream, wait: Duration) -> Option<(u16, Value)> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let end = tokio::time::Instant::now() + wait;
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .expect("a content-length");
            if body.len() >= len {
                let status = head[9..12].parse().unwrap();
                return Some((status, serde_json::from_str(&body[..len]).unwrap()));
            }
        }
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => panic!("closed before an answer: {text}"),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// An `echo` server whose request bodies being received share a budget of 256 KiB, with
/// `body_timeout` (a body that holds part of the budget keeps its pace after a sixth of it).
async fn budgeted(body_timeout: Duration) -> TestServer {
    let mut settings = config();
    settings.total_body_bytes = 256 * 1024;
    settings.body_timeout = body_timeout;
    TestServer::start(echo(), settings).await
}

type Http2Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    axum::body::Body,
>;

/// A client that speaks only HTTP/2 (cleartext, with prior knowledge).
fn http2_client() -> Http2Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// The answer on `s`, which must come (within 30 s) and give `payload` back.
async fn echoed(s: &mut TcpStream, payload: &str) {
    let (status, body) = answer(s, Duration::from_secs(30)).await.expect("an answer");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["p"], json!(payload));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_being_received_waits_for_the_budget_every_connection_shares() {
    // Long enough that the stalled body keeps its place (its pace's grace is a sixth of it).
    let server = budgeted(Duration::from_secs(120)).await;

    // A client announces a 200 KB body and sends a little of it, then nothing more.
    let stalled = dribbler("127.0.0.2", server.addr, 200 * 1024).await;
    server.gauge_until(HELD, |held| held == 200 * 1024).await;

    // Another client's 100 KB body does not fit beside it: the server reads no more of it
    // until the budget has room.
    let payload = "y".repeat(100 * 1024);
    let mut large = invoke_from("127.0.0.3", server.addr, &payload).await;
    server.gauge_until(WAITING, |n| n == 1).await;
    assert!(
        answer(&mut large, Duration::from_millis(300))
            .await
            .is_none()
    );

    // Small bodies never wait.
    let small = server
        .post_json("/invoke/echo", &json!({ "p": "hi" }))
        .await;
    assert_eq!(small.status(), 200);
    assert_eq!(
        small.json::<Value>().await.unwrap()["result"],
        json!({ "p": "hi" })
    );
    assert_eq!(server.gauge(WAITING).await, 1, "the large body still waits");

    // The dribbler goes: the large body is read whole and answered.
    drop(stalled);
    echoed(&mut large, &payload).await;
    server.gauge_until(HELD, |held| held == 0).await;
    assert_eq!(server.gauge(WAITING).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_holds_at_most_its_share_of_the_body_budget() {
    let mut settings = config();
    settings.total_body_bytes = 512 * 1024;
    settings.peer_body_bytes = 256 * 1024;
    settings.body_timeout = Duration::from_secs(120);
    let server = TestServer::start(echo(), settings).await;

    // One address holds 200 KB of its 256 KB share with a body it never finishes.
    let stalled = dribbler("127.0.0.2", server.addr, 200 * 1024).await;
    server.gauge_until(HELD, |held| held == 200 * 1024).await;

    // Its second 100 KB body passes the share, though the budget has room: it waits.
    let payload = "y".repeat(100 * 1024);
    let mut same = invoke_from("127.0.0.2", server.addr, &payload).await;
    server.gauge_until(WAITING, |n| n == 1).await;

    // Another address's 100 KB body is read and answered meanwhile.
    let mut other = invoke_from("127.0.0.3", server.addr, &payload).await;
    echoed(&mut other, &payload).await;
    assert!(
        answer(&mut same, Duration::from_millis(300))
            .await
            .is_none()
    );
    assert_eq!(
        server.gauge(WAITING).await,
        1,
        "the greedy address's body still waits"
    );

    // The dribbler goes: the share has room, and the waiting body is answered.
    drop(stalled);
    echoed(&mut same, &payload).await;
    server.gauge_until(HELD, |held| held == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_arrived_whole_is_answered_while_others_wait_for_the_budget() {
    let server = budgeted(Duration::from_secs(60)).await;

    // A 200 KB body being sent holds most of the budget.
    let payload = "y".repeat(200 * 1024 - 20);
    let body = json!({ "p": payload }).to_string();
    let mut first = connect_from("127.0.0.2", server.addr).await;
    first.write_all(head(body.len()).as_bytes()).await.unwrap();
    first.write_all(&body.as_bytes()[..1024]).await.unwrap();
    server
        .gauge_until(HELD, |held| held == body.len() as i64)
        .await;

    // Another client's 100 KB body waits behind it.
    let _waiting = dribbler("127.0.0.3", server.addr, 100 * 1024).await;
    server.gauge_until(WAITING, |n| n == 1).await;

    // The first body's last bytes arrive: it gives its budget back (the waiting one takes
    // part of it) and is answered, without asking for the budget again.
    first.write_all(&body.as_bytes()[1024..]).await.unwrap();
    echoed(&mut first, &payload).await;
    server.gauge_until(HELD, |held| held == 100 * 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_that_stops_arriving_gives_the_budget_back_before_its_body_timeout() {
    // Its pace: after 4 s, its length over 24 s.
    let server = budgeted(Duration::from_secs(24)).await;

    // A client announces a 200 KB body, sends 1 KiB of it, then nothing more.
    let mut stalled = dribbler("127.0.0.2", server.addr, 200 * 1024).await;
    server.gauge_until(HELD, |held| held == 200 * 1024).await;

    // Another client's 100 KB body waits behind it.
    let payload = "y".repeat(100 * 1024);
    let mut large = invoke_from("127.0.0.3", server.addr, &payload).await;
    server.gauge_until(WAITING, |n| n == 1).await;

    // The stalled body is cut for falling behind its pace, not kept to its body timeout, and
    // told the pace it needed.
    let (status, problem) = answer(&mut stalled, Duration::from_secs(30))
        .await
        .expect("an answer");
    assert_eq!(status, 408, "{problem}");
    assert!(
        problem["type"].as_str().unwrap().ends_with("body-timeout"),
        "{problem}"
    );
    assert_eq!(
        problem["minRate"],
        json!((200.0_f64 * 1024.0 / 24.0).ceil() as u64),
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("stopped arriving"),
        "{problem}"
    );

    // The waiting body takes the budget it gave back, and is answered.
    echoed(&mut large, &payload).await;
    server.gauge_until(HELD, |held| held == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_that_keeps_its_pace_is_read_however_slowly_it_arrives() {
    // Its pace: after 2 s, its length over 12 s (12.5 KB a second for this one).
    let server = budgeted(Duration::from_secs(12)).await;

    // 150 KB in pieces of 10 KB every 200 ms: 3 s in all, at four times the pace.
    let payload = "y".repeat(150 * 1024 - 20);
    let body = json!({ "p": payload }).to_string();
    let mut s = connect_from("127.0.0.2", server.addr).await;
    s.write_all(head(body.len()).as_bytes()).await.unwrap();
    for piece in body.as_bytes().chunks(10 * 1024) {
        s.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    echoed(&mut s, &payload).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_a_body_the_budget_cannot_hold_at_once_is_refused_as_busy() {
    let server = budgeted(Duration::from_secs(120)).await;
    let client = http2_client();
    let post = |payload: String| {
        let body = json!({ "p": payload }).to_string();
        axum::http::Request::post(format!("http://{}/invoke/echo", server.addr))
            .header("content-type", "application/json")
            .header("content-length", body.len())
            .body(axum::body::Body::from(body))
            .unwrap()
    };

    // With the budget free, a large body over HTTP/2 is read and answered.
    let payload = "y".repeat(100 * 1024);
    let answered = client.request(post(payload.clone())).await.unwrap();
    assert_eq!(answered.status(), 200);

    // An HTTP/1 client holds most of the budget: an HTTP/2 stream does not wait for it (its
    // connection would go on receiving the data, and an unread stream stalls the others), it
    // is refused as busy.
    let _stalled = dribbler("127.0.0.2", server.addr, 200 * 1024).await;
    server.gauge_until(HELD, |held| held == 200 * 1024).await;
    let refused = client.request(post(payload)).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(server.gauge(WAITING).await, 0);
    assert_eq!(server.gauge(HELD).await, 200 * 1024);

    // Small bodies pass.
    let small = client.request(post("hi".into())).await.unwrap();
    assert_eq!(small.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_a_console_form_the_budget_cannot_hold_is_refused_as_busy_not_as_bad() {
    let server = budgeted(Duration::from_secs(120)).await;
    let client = http2_client();

    // An HTTP/1 client holds most of the budget; a 100 KB try-it form over HTTP/2 cannot wait
    // for it.
    let _stalled = dribbler("127.0.0.2", server.addr, 200 * 1024).await;
    server.gauge_until(HELD, |held| held == 200 * 1024).await;
    let form = format!("csrf=x&args={}", "y".repeat(100 * 1024));
    let post = axum::http::Request::post(format!("http://{}/console/skills/echo/try", server.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("content-length", form.len())
        .body(axum::body::Body::from(form))
        .unwrap();
    let refused = client.request(post).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert!(
        refused.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(server.gauge(HELD).await, 200 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_longer_than_the_limit_is_refused_from_its_head_without_taking_the_budget() {
    let server = TestServer::start(echo(), config()).await;
    // A 2 MB body announced, against the 1 MiB limit, and none of it sent.
    let mut s = connect_from("127.0.0.2", server.addr).await;
    s.write_all(head(2 * 1024 * 1024).as_bytes()).await.unwrap();
    let (status, body) = answer(&mut s, Duration::from_secs(5))
        .await
        .expect("answered from the head");
    assert_eq!(status, 413, "{body}");
    assert_eq!(server.gauge(HELD).await, 0);
    assert_eq!(server.gauge(WAITING).await, 0);
}
