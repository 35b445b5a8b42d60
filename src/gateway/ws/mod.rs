//! The WebSocket transport, `GET /ws` on the HTTP listener: a JSON protocol (see
//! `asyncapi.yaml`, served at `/asyncapi.yaml`) to invoke skills with their logs, messages and
//! events streamed, cancel them, talk to them (`gateway-receive`), and subscribe to topics with
//! resume from the durable buffer or as a consumer group with ack and nack.
//!
//! - `crate::config::websocket`: the `websocket:` settings.
//! - [`protocol`]: the frames.
//! - [`connection`]: one socket's life.
//! - [`subscription`]: topic subscriptions of a socket.
//! - [`outbox`]: the bounded send queue and the close codes.
//! - [`hub`]: every socket of the server, the cap, and the shutdown.
//! - [`upgrade`]: the handshake; [`intake`]: the budget of messages being received.

pub mod connection;
pub mod hub;
pub mod intake;
pub mod outbox;
pub mod protocol;
pub mod subscription;
pub mod upgrade;

use std::net::SocketAddr;

use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use futures::future::BoxFuture;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::gateway::GatewayError;
use crate::gateway::door::Door;
use crate::gateway::headers::headers_json;
use crate::gateway::keys::Caller;
use crate::gateway::served::{HttpDoor, Listener};

pub use crate::config::websocket::{WsConfig, WsSettings};
pub use hub::Hub;

/// The door's name (`nonlocals.gateway.transport`).
pub const NAME: &str = "websocket";

/// The path of the endpoint.
pub const PATH: &str = "/ws";
/// Bytes read from a socket at once.
const READ_BUFFER: usize = 4 * 1024;
/// Bytes of frames gathered before they are written (a batch is flushed anyway).
const WRITE_BUFFER: usize = 16 * 1024;

/// `/ws` on the HTTP listener.
impl HttpDoor for Hub {
    fn routes(self: Arc<Self>, listener: &Listener) -> Router {
        Router::new().route(PATH, get(upgrade)).with_state(Served {
            hub: self,
            on: Arc::new(listener.clone()),
        })
    }

    /// A browser cannot put a header on a WebSocket: the socket authenticates with its first
    /// frame instead.
    fn authenticates_in_band(&self, path: &str) -> bool {
        path == PATH
    }
}

/// The WebSocket door's life: the HTTP server closes and drains it with its own connections.
impl Door for Hub {
    fn name(&self) -> &'static str {
        NAME
    }

    fn begin_close(&self) {
        Hub::begin_close(self);
    }

    fn in_flight(&self) -> i64 {
        Hub::in_flight(self)
    }

    fn drained(&self) -> BoxFuture<'_, ()> {
        Box::pin(Hub::drained(self))
    }
}

/// What the endpoint's handler shares: the hub and the listener it is served on.
#[derive(Clone)]
struct Served {
    hub: Arc<Hub>,
    /// Shared by every socket of the listener (one pointer a socket, not a copy).
    on: Arc<Listener>,
}

/// `GET /ws`: checks the origin and the connection cap, then upgrades.
async fn upgrade(
    State(Served { hub, on }): State<Served>,
    caller: Option<Extension<Caller>>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    client: Option<Extension<crate::gateway::peers::ClientAddr>>,
    headers: HeaderMap,
    upgrade: Result<upgrade::Upgrade, GatewayError>,
) -> Response {
    if let Some(why) = refused_origin(&headers, &on.cors_origins, &hub) {
        return GatewayError::CrossSite(why).into_response();
    }
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(refused) => return refused.into_response(),
    };
    if hub.is_closing() {
        return GatewayError::Unavailable("the server is shutting down".into()).into_response();
    }
    // One address may not take every socket (behind a trusted proxy: the forwarded address).
    let client = client.map_or(remote.ip(), |Extension(c)| c.0);
    let Some(held) = hub.per_peer.take(client) else {
        return GatewayError::Unavailable(format!(
            "this address has {} WebSocket connections open; close one first",
            hub.per_peer.max()
        ))
        .into_response();
    };
    let Some(slot) = hub.slot() else {
        return GatewayError::Unavailable(format!(
            "all {} WebSocket connections are in use; try again later",
            hub.config.max_connections
        ))
        .into_response();
    };
    let peer = connection::Peer {
        remote,
        client,
        headers: headers_json(&headers),
        caller: caller.map(|Extension(c)| c),
    };
    let max = hub.config.max_message;
    // Small buffers for idle sockets (the default read buffer is 128 KiB a socket, allocated
    // up front); the read buffer stays near this size, as the intake hands frames on in pieces
    // of `intake::PIECE`. `accept` sets the frame limit to the message limit.
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(Some(max));
    let budget = hub.receiving.clone();
    upgrade.accept(config, budget, client, move |socket| {
        let served = hub.track(connection::serve(socket, on, hub.clone(), peer));
        async move {
            served.await;
            drop(slot);
            drop(held);
        }
    })
}

/// Why a browser page may not open a socket here: a page's `Origin` must be the server's own,
/// a CORS origin, or one of `websocket.allowed-origins` (a socket is not subject to CORS, so
/// without this any site could use a visitor's network position). Clients that are not
/// browsers send no `Origin`.
fn refused_origin(headers: &HeaderMap, cors_origins: &[String], hub: &Hub) -> Option<String> {
    let origin = headers.get(header::ORIGIN)?.to_str().unwrap_or_default();
    let allowed = |list: &[String]| {
        list.iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
    };
    if allowed(&hub.config.allowed_origins) || allowed(cors_origins) {
        return None;
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let same = origin
        .split_once("://")
        .map(|(_, authority)| authority)
        .zip(host)
        .is_some_and(|(authority, host)| authority.eq_ignore_ascii_case(host));
    if same {
        return None;
    }
    Some(format!(
        "a page on `{origin}` may not open a WebSocket here; allow it with `websocket.allowed-origins`"
    ))
}
