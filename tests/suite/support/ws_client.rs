//! A real WebSocket client (tokio-tungstenite) for `/ws`: connect with or without a key, send
//! JSON frames, read JSON frames, and read the close the server sends.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, Request};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Long enough for anything that should happen; only reached when something is broken.
pub const GUARD: Duration = Duration::from_secs(20);

pub struct WsClient {
    pub socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// The upgrade request for `addr`, with a bearer key if given.
pub fn request(addr: SocketAddr, key: Option<&str>) -> Request<()> {
    let mut request = format!("ws://{addr}/ws").into_client_request().unwrap();
    if let Some(key) = key {
        request.headers_mut().insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
        );
    }
    request
}

impl WsClient {
    /// Connects and reads the `welcome` frame.
    pub async fn connect(addr: SocketAddr, key: Option<&str>) -> (WsClient, Value) {
        let mut client = WsClient::open(request(addr, key)).await.expect("upgrade");
        let welcome = client.recv().await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        (client, welcome)
    }

    /// [`WsClient::connect`] from the local address `from` (a loopback address such as
    /// 127.0.0.2: another client as the server counts them).
    pub async fn connect_from(from: IpAddr, addr: SocketAddr) -> (WsClient, Value) {
        let tcp = tokio::net::TcpSocket::new_v4().unwrap();
        tcp.bind(SocketAddr::new(from, 0)).unwrap();
        let tcp = tcp.connect(addr).await.expect("connect");
        let (socket, _) =
            tokio_tungstenite::client_async(request(addr, None), MaybeTlsStream::Plain(tcp))
                .await
                .expect("upgrade");
        let mut client = WsClient { socket };
        let welcome = client.recv().await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        (client, welcome)
    }

    pub async fn open(request: Request<()>) -> Result<WsClient, Error> {
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(WsClient { socket })
    }

    pub async fn send(&mut self, frame: Value) {
        self.socket
            .send(Message::Text(frame.to_string().into()))
            .await
            .expect("frame sent");
    }

    pub async fn send_raw(&mut self, message: Message) {
        self.socket.send(message).await.expect("frame sent");
    }

    /// The next JSON frame (pings and pongs are skipped); panics on a close.
    pub async fn recv(&mut self) -> Value {
        match self.next().await {
            Frame::Json(v) => v,
            Frame::Closed(code, reason) => panic!("closed: {code} {reason}"),
        }
    }

    /// The next JSON frame or the close.
    pub async fn next(&mut self) -> Frame {
        loop {
            let message = tokio::time::timeout(GUARD, self.socket.next())
                .await
                .expect("a frame arrives");
            match message {
                Some(Ok(Message::Text(text))) => {
                    return Frame::Json(serde_json::from_str(text.as_str()).expect("JSON frame"));
                }
                Some(Ok(Message::Close(frame))) => {
                    return match frame {
                        Some(f) => Frame::Closed(u16::from(f.code), f.reason.to_string()),
                        None => Frame::Closed(u16::from(CloseCode::Status), String::new()),
                    };
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Frame::Closed(1006, "no close frame".into()),
            }
        }
    }

    /// Frames up to the one `last` accepts (included).
    pub async fn until(&mut self, last: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let done = last(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Frames of invocation `id` up to its `result` or `error`.
    pub async fn answer(&mut self, id: &str) -> Vec<Value> {
        self.until(|f| f["id"] == id && (f["type"] == "result" || f["type"] == "error"))
            .await
            .into_iter()
            .filter(|f| f["id"] == id)
            .collect()
    }

    /// Reads until the server closes; returns the close code and reason.
    pub async fn closed(&mut self) -> (u16, String) {
        loop {
            if let Frame::Closed(code, reason) = self.next().await {
                return (code, reason);
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Json(Value),
    Closed(u16, String),
}
