//! The WebSocket handshake of `/ws` (RFC 6455 over HTTP/1.1, RFC 8441 over HTTP/2). It is done
//! here rather than by axum so that the upgraded stream is read through [`Intake`], which keeps
//! the budget of messages being received.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::gateway::GatewayError;
use crate::gateway::ws::PATH;
use crate::gateway::ws::intake::{Budget, Intake};

/// The message limit when the config gives none (the protocol's own default).
const DEFAULT_MAX_MESSAGE: usize = 64 << 20;

/// An upgraded socket, read through the budget.
pub type Socket = WebSocketStream<Intake<TokioIo<Upgraded>>>;

/// A request to open a WebSocket, checked.
pub struct Upgrade {
    /// `Sec-WebSocket-Key` (HTTP/1.1 only: HTTP/2 has none).
    key: Option<HeaderValue>,
    on_upgrade: OnUpgrade,
}

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = GatewayError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Upgrade, GatewayError> {
        let refuse =
            |why: &str| GatewayError::BadRequest(format!("`{PATH}` speaks WebSocket: {why}"));
        let key = if parts.version <= Version::HTTP_11 {
            if parts.method != Method::GET {
                return Err(refuse("the upgrade request's method must be GET"));
            }
            if !has_token(&parts.headers, header::CONNECTION, "upgrade") {
                return Err(refuse("the `Connection` header must name `upgrade`"));
            }
            if !has_token(&parts.headers, header::UPGRADE, "websocket") {
                return Err(refuse("the `Upgrade` header must be `websocket`"));
            }
            Some(
                parts
                    .headers
                    .get(header::SEC_WEBSOCKET_KEY)
                    .ok_or_else(|| refuse("the `Sec-WebSocket-Key` header is missing"))?
                    .clone(),
            )
        } else {
            let websocket = parts
                .extensions
                .get::<hyper::ext::Protocol>()
                .is_some_and(|p| p.as_str() == "websocket");
            if parts.method != Method::CONNECT || !websocket {
                return Err(refuse(
                    "over HTTP/2 the request must be CONNECT with `:protocol` websocket",
                ));
            }
            None
        };
        let version = parts.headers.get(header::SEC_WEBSOCKET_VERSION);
        if version.is_none_or(|v| v.as_bytes() != b"13") {
            return Err(refuse("the `Sec-WebSocket-Version` header must be 13"));
        }
        let on_upgrade = parts
            .extensions
            .remove::<OnUpgrade>()
            .ok_or_else(|| refuse("this connection cannot be upgraded"))?;
        Ok(Upgrade { key, on_upgrade })
    }
}

impl Upgrade {
    /// Accepts `client`'s socket: `serve` runs on it once the connection is upgraded, its
    /// reads kept within `budget`.
    pub fn accept<F, Fut>(
        self,
        config: WebSocketConfig,
        budget: Arc<Budget>,
        client: IpAddr,
        serve: F,
    ) -> Response
    where
        F: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // The intake refuses a message over the limit with a frame header over it, so the
        // protocol's frame limit must be the same (it sees no other large frame).
        let max_message = [config.max_message_size, config.max_frame_size]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(DEFAULT_MAX_MESSAGE);
        let config = config
            .max_message_size(Some(max_message))
            .max_frame_size(Some(max_message));
        let on_upgrade = self.on_upgrade;
        tokio::spawn(async move {
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            let stream = Intake::new(TokioIo::new(upgraded), budget, client, max_message);
            let socket = WebSocketStream::from_raw_socket(stream, Role::Server, Some(config)).await;
            serve(socket).await;
        });
        match self.key {
            Some(key) => (
                StatusCode::SWITCHING_PROTOCOLS,
                [
                    (header::CONNECTION, HeaderValue::from_static("upgrade")),
                    (header::UPGRADE, HeaderValue::from_static("websocket")),
                    (
                        header::SEC_WEBSOCKET_ACCEPT,
                        HeaderValue::try_from(derive_accept_key(key.as_bytes()))
                            .expect("base64 is a valid header value"),
                    ),
                ],
            )
                .into_response(),
            None => StatusCode::OK.into_response(),
        }
    }
}

/// True when the comma-separated `name` header lists `token` (any case).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}
