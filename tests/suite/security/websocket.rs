//! A WebSocket client that sends invocations and never reads: what waits for it is bounded in
//! bytes (its own queue, and every socket's together), it is let go as soon as it falls behind
//! or takes nothing for the write timeout, and what was queued for it is freed. A client that
//! dribbles a large message in holds no more than every socket's shared receive budget lets it.

use std::time::Duration;

use serde_json::json;

use crate::support::common::Project;
use crate::support::server::{TestServer, config};
use crate::support::ws_client::{Frame, WsClient};

fn echo() -> Project {
    let p = Project::new();
    p.skill(
        "echo.skill.js",
        "/*---\nname: echo\ndescription: Gives its args back.\n---*/\nexport default async function (ctx, args) { return args; }\n",
    );
    p
}

/// `skillgate_ws_send_queue_bytes` in `/metrics`.
async fn queued_bytes(server: &TestServer) -> i64 {
    server.gauge("skillgate_ws_send_queue_bytes").await
}

/// Sends `count` invocations of `echo` with `payload`, reading nothing.
async fn flood(client: &mut WsClient, prefix: &str, count: usize, payload: &str) {
    use futures::SinkExt;
    for i in 0..count {
        let frame = json!({ "type": "invoke", "id": format!("{prefix}{i}"), "skill": "echo", "args": { "p": payload } });
        let text = tokio_tungstenite::tungstenite::Message::Text(frame.to_string().into());
        if client.socket.send(text).await.is_err() {
            break;
        }
    }
}

/// The results read until the server closes the socket.
async fn results_until_closed(client: &mut WsClient) -> usize {
    results_until_closed_or_all(client, usize::MAX).await
}

/// How many `result` frames arrive before the socket closes, or `all` when every one came.
async fn results_until_closed_or_all(client: &mut WsClient, all: usize) -> usize {
    let mut results = 0;
    while results < all {
        match client.next().await {
            Frame::Json(f) if f["type"] == "result" => results += 1,
            Frame::Json(_) => {}
            Frame::Closed(..) => return results,
        }
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_let_go_and_what_waited_for_it_is_freed() {
    let mut settings = config();
    settings.websocket.send_queue_bytes = 512 * 1024;
    settings.websocket.idle_timeout = Duration::from_secs(3);
    let server = TestServer::start(echo(), settings).await;
    let (mut client, _) = WsClient::connect(server.addr, None).await;

    // 60 invocations whose answers are 400 KB each: 24 MB for a client that reads nothing.
    let payload = "x".repeat(400 * 1024);
    let sent = 60;
    flood(&mut client, "i", sent, &payload).await;

    // The server let it go: the socket ends before every answer came.
    let results = results_until_closed(&mut client).await;
    assert!(
        results < sent,
        "all {results} answers were kept for a client that read nothing"
    );

    // Nothing stays queued for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let queued = queued_bytes(&server).await;
        if queued == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{queued} bytes still queued"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bytes_queued_to_all_clients_together_are_bounded() {
    let mut settings = config();
    // Each socket could hold 8 MB; all of them together only 1 MB.
    settings.websocket.total_send_queue_bytes = 1024 * 1024;
    // Long enough that only the total bound lets a client go here.
    settings.websocket.idle_timeout = Duration::from_secs(60);
    let server = TestServer::start(echo(), settings).await;
    // 6 MB of answers a client: more than the kernel's socket buffers take for one that does
    // not read, whatever pace the answers come at.
    let payload = "x".repeat(300 * 1024);
    let sent = 20;
    let mut clients = Vec::new();
    for c in 0..4 {
        let (mut client, _) = WsClient::connect(server.addr, None).await;
        flood(&mut client, &format!("c{c}i"), sent, &payload).await;
        clients.push(client);
    }
    let mut let_go = 0;
    for client in &mut clients {
        // A client the bound did not reach gets every answer and stays open.
        let results = results_until_closed_or_all(client, sent).await;
        if results < sent {
            let_go += 1;
        }
    }
    assert!(
        let_go > 0,
        "every client kept all its answers past the total bound"
    );
}

/// The start of a masked text frame from a client: its header announcing `len` payload bytes,
/// then `sent` of them.
fn frame_start(len: usize, sent: usize) -> Vec<u8> {
    let mut bytes = vec![0x81, 0x80 | 127];
    bytes.extend_from_slice(&(len as u64).to_be_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    bytes.extend(std::iter::repeat_n(b' ', sent));
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_message_being_received_waits_for_the_budget_every_socket_shares() {
    use tokio::io::AsyncWriteExt;
    use tokio_tungstenite::MaybeTlsStream;

    let mut settings = config();
    settings.websocket.total_receive_bytes = 256 * 1024;
    let server = TestServer::start(echo(), settings).await;

    // A client announces a 200 KB message and sends a little of it, then nothing more.
    let (mut dribbler, _) = WsClient::connect(server.addr, None).await;
    let MaybeTlsStream::Plain(tcp) = dribbler.socket.get_mut() else {
        unreachable!("a plain socket")
    };
    tcp.write_all(&frame_start(200 * 1024, 1024)).await.unwrap();
    server
        .gauge_until("skillgate_ws_receive_bytes", |held| held == 200 * 1024)
        .await;

    // Another client's 100 KB message does not fit beside it: the server reads no more of it
    // until the budget has room.
    let (mut large, _) = WsClient::connect(server.addr, None).await;
    let payload = "y".repeat(100 * 1024);
    large
        .send(json!({ "type": "invoke", "id": "large", "skill": "echo", "args": { "p": payload } }))
        .await;
    server
        .gauge_until("skillgate_ws_receive_waiting", |n| n == 1)
        .await;

    // Small messages never wait for the budget.
    let (mut small, _) = WsClient::connect(server.addr, None).await;
    small
        .send(json!({ "type": "invoke", "id": "small", "skill": "echo", "args": { "p": "hi" } }))
        .await;
    let answer = small.answer("small").await;
    assert_eq!(answer.last().unwrap()["value"], json!({ "p": "hi" }));
    assert_eq!(
        server.gauge("skillgate_ws_receive_waiting").await,
        1,
        "the large message still waits"
    );

    // The dribbler goes: the large message is read whole and answered.
    drop(dribbler);
    let answer = large.answer("large").await;
    assert_eq!(answer.last().unwrap()["value"]["p"], json!(payload));
    server
        .gauge_until("skillgate_ws_receive_bytes", |held| held == 0)
        .await;
    assert_eq!(server.gauge("skillgate_ws_receive_waiting").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_holds_at_most_its_share_of_the_receive_budget() {
    use std::net::{IpAddr, Ipv4Addr};
    use tokio::io::AsyncWriteExt;
    use tokio_tungstenite::MaybeTlsStream;

    let mut settings = config();
    settings.websocket.total_receive_bytes = 512 * 1024;
    settings.websocket.peer_receive_bytes = 256 * 1024;
    let server = TestServer::start(echo(), settings).await;
    let greedy = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

    // One address announces a 200 KB message and sends a little of it, then nothing more.
    let (mut dribbler, _) = WsClient::connect_from(greedy, server.addr).await;
    let MaybeTlsStream::Plain(tcp) = dribbler.socket.get_mut() else {
        unreachable!("a plain socket")
    };
    tcp.write_all(&frame_start(200 * 1024, 1024)).await.unwrap();
    server
        .gauge_until("skillgate_ws_receive_bytes", |held| held == 200 * 1024)
        .await;

    // Its second socket's 100 KB message passes the address's share, though the budget has
    // room for it: it waits.
    let (mut same, _) = WsClient::connect_from(greedy, server.addr).await;
    let payload = "y".repeat(100 * 1024);
    same.send(json!({ "type": "invoke", "id": "same", "skill": "echo", "args": { "p": payload } }))
        .await;
    server
        .gauge_until("skillgate_ws_receive_waiting", |n| n == 1)
        .await;

    // Another address's 100 KB message is read and answered meanwhile.
    let (mut other, _) = WsClient::connect(server.addr, None).await;
    other
        .send(json!({ "type": "invoke", "id": "other", "skill": "echo", "args": { "p": payload } }))
        .await;
    let answer = other.answer("other").await;
    assert_eq!(answer.last().unwrap()["value"]["p"], json!(payload));
    assert_eq!(
        server.gauge("skillgate_ws_receive_waiting").await,
        1,
        "the greedy address's second message still waits"
    );

    // The dribbler goes: the address's share has room, and its waiting message is answered.
    drop(dribbler);
    let answer = same.answer("same").await;
    assert_eq!(answer.last().unwrap()["value"]["p"], json!(payload));
    server
        .gauge_until("skillgate_ws_receive_bytes", |held| held == 0)
        .await;
    assert_eq!(server.gauge("skillgate_ws_receive_waiting").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_message_that_stops_arriving_gives_the_budget_back_before_the_idle_timeout() {
    use std::net::{IpAddr, Ipv4Addr};
    use tokio::io::AsyncWriteExt;
    use tokio_tungstenite::MaybeTlsStream;

    let mut settings = config();
    settings.websocket.total_receive_bytes = 256 * 1024;
    // Its pace: after 6 s, its length over the 36 s idle timeout (more than the 20 s the
    // client below waits for the socket to end).
    settings.websocket.idle_timeout = Duration::from_secs(36);
    let server = TestServer::start(echo(), settings).await;

    // A client announces a 200 KB message, sends 1 KiB of it, then nothing more.
    let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let (mut stalled, _) = WsClient::connect_from(from, server.addr).await;
    let MaybeTlsStream::Plain(tcp) = stalled.socket.get_mut() else {
        unreachable!("a plain socket")
    };
    tcp.write_all(&frame_start(200 * 1024, 1024)).await.unwrap();
    server
        .gauge_until("skillgate_ws_receive_bytes", |held| held == 200 * 1024)
        .await;

    // Another client's 100 KB message waits behind it.
    let (mut waiting, _) = WsClient::connect(server.addr, None).await;
    let payload = "y".repeat(100 * 1024);
    waiting
        .send(json!({ "type": "invoke", "id": "w", "skill": "echo", "args": { "p": payload } }))
        .await;
    server
        .gauge_until("skillgate_ws_receive_waiting", |n| n == 1)
        .await;

    // The stalled socket falls behind its pace and is let go, long before its idle timeout ...
    let (code, reason) = tokio::time::timeout(Duration::from_secs(20), stalled.closed())
        .await
        .expect("let go before its idle timeout");
    assert_eq!(code, 1008, "{reason}");
    assert!(reason.contains("stopped arriving"), "{reason}");
    // ... and the waiting message takes the budget it gave back, and is answered.
    let answer = waiting.answer("w").await;
    assert_eq!(answer.last().unwrap()["value"]["p"], json!(payload));
    server
        .gauge_until("skillgate_ws_receive_bytes", |held| held == 0)
        .await;
}
