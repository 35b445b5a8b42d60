//! Settings of the WebSocket endpoint: [`WsSettings`] as given (flags, `SKILLGATE_WS_*`
//! variables and the `websocket:` section of the config file share it) and [`WsConfig`], what
//! the endpoint runs with.

use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::config::errors::ConfigErrors;
use crate::config::values::{List, Seconds, above_zero, at_least, share_fits};

/// The resolved settings of `/ws`.
#[derive(Debug, Clone)]
pub struct WsConfig {
    /// Serve `/ws` at all.
    pub enabled: bool,
    /// How long a socket may stay without a valid key (when keys are configured and the
    /// upgrade request carried none) before it is closed.
    pub auth_timeout: Duration,
    /// How long a socket may send nothing (no frame, no ping) before it is closed.
    pub idle_timeout: Duration,
    /// Largest message a client may send, in bytes; a larger one closes the socket with 1009.
    pub max_message: usize,
    /// Frames that may wait for a client that reads slowly; past that it is closed with 1013.
    pub send_queue: usize,
    /// Bytes that may wait for one client; past that it is closed with 1013.
    pub send_queue_bytes: usize,
    /// Bytes that may wait for all clients together; the client whose frame would pass it is
    /// closed with 1013.
    pub total_send_queue_bytes: usize,
    /// Bytes of large messages being received on every socket together; a socket whose
    /// message would pass it waits (its client's bytes stay in the network) until others
    /// arrive.
    pub total_receive_bytes: usize,
    /// What of `total_receive_bytes` the sockets of one client address may hold together.
    pub peer_receive_bytes: usize,
    /// Sockets open at once; more are refused with 503.
    pub max_connections: usize,
    /// Sockets one client address may have open at once; more are refused with 503.
    pub max_connections_per_peer: usize,
    /// Browser origins allowed besides the server's own (and the HTTP CORS origins); `*` is any.
    pub allowed_origins: Vec<String>,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            enabled: true,
            auth_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_message: 1024 * 1024,
            send_queue: 1024,
            send_queue_bytes: 8 * 1024 * 1024,
            total_send_queue_bytes: 128 * 1024 * 1024,
            total_receive_bytes: 32 * 1024 * 1024,
            peer_receive_bytes: 8 * 1024 * 1024,
            max_connections: 1024,
            max_connections_per_peer: 32,
            allowed_origins: Vec::new(),
        }
    }
}

/// The WebSocket settings as given. Unset means "the next source decides" (flags and
/// variables, then the file, then the defaults of [`WsConfig`]).
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[command(next_help_heading = "WebSocket")]
pub struct WsSettings {
    /// Serve the WebSocket endpoint `/ws` [default: true].
    #[arg(id = "ws_enabled", long = "ws", env = "SKILLGATE_WS")]
    pub enabled: Option<bool>,
    /// Seconds a socket may take to authenticate (an `auth` message) when its upgrade request
    /// carried no key [default: 10].
    #[arg(long = "ws-auth-timeout", env = "SKILLGATE_WS_AUTH_TIMEOUT")]
    pub auth_timeout: Option<Seconds>,
    /// Seconds a socket may send nothing (clients send `ping`) before it is closed; a message
    /// over 16 KiB that holds room in the receive budget must also arrive within it, at its pace
    /// after a sixth of it [default: 60].
    #[arg(long = "ws-idle-timeout", env = "SKILLGATE_WS_IDLE_TIMEOUT")]
    pub idle_timeout: Option<Seconds>,
    /// Largest message a client may send, in bytes; larger closes the socket with 1009
    /// [default: 1048576].
    #[arg(long = "ws-max-message", env = "SKILLGATE_WS_MAX_MESSAGE")]
    pub max_message: Option<usize>,
    /// Frames that may wait for a slow client before it is closed with 1013 [default: 1024].
    #[arg(long = "ws-send-queue", env = "SKILLGATE_WS_SEND_QUEUE")]
    pub send_queue: Option<usize>,
    /// Bytes that may wait for a slow client before it is closed with 1013 [default: 8388608].
    #[arg(long = "ws-send-queue-bytes", env = "SKILLGATE_WS_SEND_QUEUE_BYTES")]
    pub send_queue_bytes: Option<usize>,
    /// Bytes that may wait for all clients together; the client whose frame would pass it is
    /// closed with 1013 [default: 134217728].
    #[arg(
        long = "ws-total-send-queue-bytes",
        env = "SKILLGATE_WS_TOTAL_SEND_QUEUE_BYTES"
    )]
    pub total_send_queue_bytes: Option<usize>,
    /// Bytes of messages larger than 16 KiB being received on all sockets together; a socket
    /// whose message would pass it waits until others have arrived [default: 33554432].
    #[arg(
        long = "ws-total-receive-bytes",
        env = "SKILLGATE_WS_TOTAL_RECEIVE_BYTES"
    )]
    pub total_receive_bytes: Option<usize>,
    /// What of `ws-total-receive-bytes` the sockets of one client address may hold together
    /// (behind a trusted proxy: the forwarded address); past it that client's next large
    /// message waits [default: 8388608].
    #[arg(
        long = "ws-peer-receive-bytes",
        env = "SKILLGATE_WS_PEER_RECEIVE_BYTES"
    )]
    pub peer_receive_bytes: Option<usize>,
    /// WebSocket connections open at once; more are refused with 503 [default: 1024].
    #[arg(
        id = "ws_max_connections",
        long = "ws-max-connections",
        env = "SKILLGATE_WS_MAX_CONNECTIONS"
    )]
    pub max_connections: Option<usize>,
    /// WebSocket connections one client address may have open at once; more are refused with
    /// 503 [default: 32].
    #[arg(
        id = "ws_max_connections_per_peer",
        long = "ws-max-connections-per-peer",
        env = "SKILLGATE_WS_MAX_CONNECTIONS_PER_PEER"
    )]
    pub max_connections_per_peer: Option<usize>,
    /// Browser origins allowed to open a socket besides the server's own and the CORS
    /// origins, comma-separated, or `*` [default: none].
    #[arg(long = "ws-allowed-origins", env = "SKILLGATE_WS_ALLOWED_ORIGINS")]
    pub allowed_origins: Option<List>,
}

impl WsSettings {
    /// These settings, with what `file` sets where these leave a gap.
    pub fn or(self, file: WsSettings) -> WsSettings {
        WsSettings {
            enabled: self.enabled.or(file.enabled),
            auth_timeout: self.auth_timeout.or(file.auth_timeout),
            idle_timeout: self.idle_timeout.or(file.idle_timeout),
            max_message: self.max_message.or(file.max_message),
            send_queue: self.send_queue.or(file.send_queue),
            send_queue_bytes: self.send_queue_bytes.or(file.send_queue_bytes),
            total_send_queue_bytes: self.total_send_queue_bytes.or(file.total_send_queue_bytes),
            total_receive_bytes: self.total_receive_bytes.or(file.total_receive_bytes),
            peer_receive_bytes: self.peer_receive_bytes.or(file.peer_receive_bytes),
            max_connections: self.max_connections.or(file.max_connections),
            max_connections_per_peer: self
                .max_connections_per_peer
                .or(file.max_connections_per_peer),
            allowed_origins: self.allowed_origins.or(file.allowed_origins),
        }
    }
}

impl WsConfig {
    /// The settings over the defaults, checked; mistakes are reported under `websocket.x`.
    pub fn resolve(
        settings: WsSettings,
        origin: &dyn Fn(&str) -> Option<String>,
    ) -> Result<WsConfig, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        let mut config = WsConfig::default();
        config.enabled = settings.enabled.unwrap_or(config.enabled);
        let seconds = [
            (
                "auth-timeout",
                settings.auth_timeout,
                &mut config.auth_timeout,
            ),
            (
                "idle-timeout",
                settings.idle_timeout,
                &mut config.idle_timeout,
            ),
        ];
        for (key, value, slot) in seconds {
            above_zero(&mut errors, &format!("websocket.{key}"), value, slot);
        }
        // Unless given, the receive budget and its share grow to hold one message of the limit.
        let max_message = settings.max_message.unwrap_or(config.max_message);
        config.total_receive_bytes = config.total_receive_bytes.max(max_message);
        config.peer_receive_bytes = config.peer_receive_bytes.max(max_message);
        let counts = [
            ("max-message", settings.max_message, &mut config.max_message),
            ("send-queue", settings.send_queue, &mut config.send_queue),
            (
                "send-queue-bytes",
                settings.send_queue_bytes,
                &mut config.send_queue_bytes,
            ),
            (
                "total-send-queue-bytes",
                settings.total_send_queue_bytes,
                &mut config.total_send_queue_bytes,
            ),
            (
                "total-receive-bytes",
                settings.total_receive_bytes,
                &mut config.total_receive_bytes,
            ),
            (
                "peer-receive-bytes",
                settings.peer_receive_bytes,
                &mut config.peer_receive_bytes,
            ),
            (
                "max-connections",
                settings.max_connections,
                &mut config.max_connections,
            ),
            (
                "max-connections-per-peer",
                settings.max_connections_per_peer,
                &mut config.max_connections_per_peer,
            ),
        ];
        for (key, value, slot) in counts {
            at_least(&mut errors, &format!("websocket.{key}"), (value, 1), slot);
        }
        share_fits(
            &mut errors,
            (
                "websocket.total-receive-bytes",
                "websocket.peer-receive-bytes",
            ),
            (config.total_receive_bytes, config.peer_receive_bytes),
            ("max-message", config.max_message),
        );
        if let Some(List(origins)) = settings.allowed_origins {
            config.allowed_origins = origins;
        }
        errors.located(origin).or_ok(config)
    }
}
