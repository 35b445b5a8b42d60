//! Why the HTTP server could not start: a setting it cannot use (a glob, a host, a CORS origin,
//! the rate limit, the `public/` folder), a custom route it refuses, or an address it cannot
//! listen on. `skillgate serve` prints the message and exits.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::gateway::http::hosts::BadHost;
use crate::gateway::http::routes::RouteError;
use crate::gateway::policy::PatternError;

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Pattern(#[from] PatternError),
    #[error(transparent)]
    Host(#[from] BadHost),
    #[error("cannot open the public folder {}: {source}", path.display())]
    PublicDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the rate limit needs a rate and a burst above 0")]
    RateLimit,
    #[error("CORS origin `{0}` is not a valid header value")]
    CorsOrigin(String),
    #[error("http.trusted-proxies: {0}")]
    TrustedProxies(String),
    /// Paths of doors served on the listener that are already served (one a line).
    #[error("{}", .0.join("\n"))]
    DoorPath(Vec<String>),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl BindError {
    /// As a transport's start error: a setting it refuses is the configuration's mistake
    /// (exit 2); an address it cannot listen on is the world's (exit 1).
    pub fn for_transport(self) -> crate::gateway::transport::StartError {
        use crate::gateway::transport::StartError as Transport;
        match self {
            BindError::Listen { .. } | BindError::PublicDir { .. } => {
                Transport::runtime("http", self.to_string())
            }
            _ => Transport::config("http", self.to_string()),
        }
    }
}
