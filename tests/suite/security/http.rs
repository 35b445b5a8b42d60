//! Security of the HTTP edge, over a real socket: sockets that send nothing and the connection
//! cap, stalled bodies, and cut-off SSE streams.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use skillgate::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Project, native};
use crate::server::{TestServer, config};

/// A bound on every wait, only so a broken server fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(15);

fn project() -> Project {
    let project = Project::new();
    project
        .skill(
            "hello.skill.md",
            "---\nname: hello\ndescription: Greets.\n---\nhi\n",
        )
        .skill(
            "admin.skill.md",
            "---\nname: admin\ndescription: Admin.\n---\nroot\n",
        );
    project
}

/// Reads until the server closes the socket (a reset counts as closed); what it sent first.
async fn until_closed(socket: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("the server keeps the connection open");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `request` on a new connection and reads the answer until the server closes it.
async fn raw(addr: SocketAddr, request: &str) -> String {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    until_closed(&mut socket).await
}

// 1. Sockets that never send a byte, and the connection cap.

#[tokio::test]
async fn a_socket_that_sends_nothing_is_closed_after_the_header_timeout() {
    let mut settings = config();
    settings.header_timeout = Duration::from_millis(300);
    let mut server = TestServer::start(project(), settings).await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    assert_eq!(until_closed(&mut silent).await, "", "nothing is answered");
    assert_eq!(server.get("/healthz").await.status(), 200);
    server.finish().await;
}

#[tokio::test]
async fn idle_sockets_filling_the_connection_cap_are_closed_and_healthz_answers_again() {
    let mut settings = config();
    settings.header_timeout = Duration::from_millis(300);
    settings.max_connections = 2;
    let mut server = TestServer::start(project(), settings).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // Waits in the backlog until an idle socket is closed, then is served.
    let health = tokio::time::timeout(PATIENCE, reqwest::get(server.url("/healthz")))
        .await
        .expect("/healthz never answered")
        .unwrap();
    assert_eq!(health.status(), 200);
    for socket in &mut idle {
        assert_eq!(until_closed(socket).await, "");
    }
    server.finish().await;
}

#[tokio::test]
async fn over_the_connection_cap_a_connection_waits_until_one_closes() {
    let mut settings = config();
    settings.header_timeout = Duration::from_secs(10);
    settings.max_connections = 1;
    let mut server = TestServer::start(project(), settings).await;
    // The first connection is served and stays open (keep-alive), holding the only slot.
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    first
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: skillgate\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(PATIENCE, first.read_exact(&mut head))
        .await
        .expect("the first connection is served")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    second
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: skillgate\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), second.read(&mut byte)).await;
    assert!(early.is_err(), "a connection over the cap was served");
    drop(first);
    let answer = until_closed(&mut second).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.finish().await;
}

// 2. Bodies that stall or trickle.

#[tokio::test]
async fn a_request_body_that_stalls_is_answered_408() {
    let mut settings = config();
    settings.body_timeout = Duration::from_millis(300);
    let mut server = TestServer::start(project(), settings).await;
    let answer = raw(
        server.addr,
        "POST /invoke/hello HTTP/1.1\r\nhost: skillgate\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("/docs#problem-body-timeout"), "{answer}");
    server.finish().await;
}

#[tokio::test]
async fn a_request_body_that_trickles_is_answered_408_when_the_whole_body_is_late() {
    let mut settings = config();
    settings.body_timeout = Duration::from_millis(500);
    let mut server = TestServer::start(project(), settings).await;
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    socket
        .write_all(b"POST /invoke/hello HTTP/1.1\r\nhost: skillgate\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n")
        .await
        .unwrap();
    // One byte every 100 ms: each arrives well within the timeout, the whole body never does.
    let mut answer = Vec::new();
    for _ in 0..100 {
        let mut chunk = [0u8; 4096];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), socket.read(&mut chunk)).await
        {
            answer.extend_from_slice(&chunk[..n]);
            break;
        }
        if socket.write_all(b" ").await.is_err() {
            break;
        }
    }
    let rest = until_closed(&mut socket).await;
    let answer = String::from_utf8_lossy(&answer).into_owned() + &rest;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    server.finish().await;
}

// 3. Streams cut off at shutdown.

#[tokio::test]
async fn open_sse_streams_count_as_cut_off_when_the_grace_runs_out() {
    let mut settings = config();
    settings.grace = Duration::from_millis(200);
    let mut server = TestServer::start_with(project(), settings, |b| {
        b.native(native(
            "name: endless\ndescription: Streams forever.\n",
            |ctx: Context, _args| async move {
                ctx.invoke(
                    "gateway-send",
                    json!({ "message": "started" }),
                    Default::default(),
                )
                .await?;
                std::future::pending::<()>().await;
                Ok(None)
            },
        ))
    })
    .await;
    let mut events = server.stream("/invoke/endless", &json!({})).await;
    assert_eq!(events.next().await.unwrap().data, json!("started"));
    let report = tokio::time::timeout(PATIENCE, server.finish())
        .await
        .expect("shutdown ends");
    assert!(!report.drained);
    assert_eq!(report.abandoned, 1, "{report:?}");
}
