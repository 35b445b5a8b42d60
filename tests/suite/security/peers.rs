//! One client cannot take every slot: connections and WebSocket sockets are capped per client
//! address beside the global caps, so others (here from 127.0.0.2) are still served; behind a
//! trusted proxy the forwarded address counts, and from anyone else forwarding headers are
//! ignored.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::server::{TestServer, config, hello_and_admin};

/// A connection to `server` from the local address `from`.
async fn connect_from(from: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(server).await.unwrap()
}

/// Sends `request` and reads the status line (empty when the server closed without a word).
async fn status_line(stream: &mut TcpStream, request: &str) -> String {
    let _ = stream.write_all(request.as_bytes()).await;
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
        .await
        .expect("an answer or a close")
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

const HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";

fn upgrade(forwarded_for: Option<&str>) -> String {
    let xff = forwarded_for.map_or(String::new(), |f| format!("x-forwarded-for: {f}\r\n"));
    format!(
        "GET /ws HTTP/1.1\r\nhost: localhost\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n{xff}\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holding_its_connection_cap_does_not_keep_others_out() {
    let mut settings = config();
    settings.max_connections_per_peer = 4;
    let server = TestServer::start(hello_and_admin(), settings).await;
    // Four connections that never finish their headers.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = connect_from("127.0.0.1", server.addr).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    // A fifth from the same address is closed as it comes.
    let mut fifth = connect_from("127.0.0.1", server.addr).await;
    assert_eq!(status_line(&mut fifth, HEALTHZ).await, "");
    // Another address is served.
    let mut other = connect_from("127.0.0.2", server.addr).await;
    assert_eq!(status_line(&mut other, HEALTHZ).await, "HTTP/1.1 200 OK");
    // Room comes back as the address lets go.
    drop(held);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut again = connect_from("127.0.0.1", server.addr).await;
        if status_line(&mut again, HEALTHZ).await == "HTTP/1.1 200 OK" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "room again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_sockets_are_capped_per_address_and_forwarded_addresses_count_only_from_trusted_proxies()
 {
    let mut settings = config();
    settings.websocket.max_connections_per_peer = 2;
    settings.trusted_proxies = vec!["127.0.0.1".into()];
    let server = TestServer::start(hello_and_admin(), settings).await;
    let mut open = Vec::new();

    // Through the trusted proxy (127.0.0.1): each forwarded client has a cap of its own.
    for client in ["203.0.113.1", "203.0.113.1", "203.0.113.2"] {
        let mut s = connect_from("127.0.0.1", server.addr).await;
        assert_eq!(
            status_line(&mut s, &upgrade(Some(client))).await,
            "HTTP/1.1 101 Switching Protocols"
        );
        open.push(s);
    }
    let mut third = connect_from("127.0.0.1", server.addr).await;
    assert_eq!(
        status_line(&mut third, &upgrade(Some("203.0.113.1"))).await,
        "HTTP/1.1 503 Service Unavailable"
    );

    // From an address that is not a trusted proxy, forwarding headers are ignored: its own cap.
    for client in ["198.51.100.1", "198.51.100.2"] {
        let mut s = connect_from("127.0.0.2", server.addr).await;
        assert_eq!(
            status_line(&mut s, &upgrade(Some(client))).await,
            "HTTP/1.1 101 Switching Protocols"
        );
        open.push(s);
    }
    let mut spoofed = connect_from("127.0.0.2", server.addr).await;
    assert_eq!(
        status_line(&mut spoofed, &upgrade(Some("198.51.100.3"))).await,
        "HTTP/1.1 503 Service Unavailable"
    );
}
