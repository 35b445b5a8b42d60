//! HTTP's key check: API keys presented as `Authorization: Bearer <key>`, which paths are
//! public, and the per-caller key the rate limiter counts by. The keys themselves and the
//! [`Caller`] put on a request are the gateway's ([`crate::gateway::keys`]).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use globset::{Glob, GlobBuilder, GlobSet};

use crate::gateway::GatewayError;
use crate::gateway::http::state::AppState;
use crate::gateway::keys::Caller;
use crate::gateway::policy::PatternError;
use crate::gateway::policy::access::glob_set;

/// Path patterns reachable without a key.
#[derive(Debug, Clone)]
pub struct PublicPaths(GlobSet);

impl PublicPaths {
    /// `/healthz` and `patterns` (globs in which `*` stays within one path segment).
    pub fn new(patterns: &[String]) -> Result<PublicPaths, PatternError> {
        let always = std::iter::once(("/healthz".to_string(), Glob::new("/healthz")));
        let listed = patterns.iter().map(|p| {
            let glob = GlobBuilder::new(p).literal_separator(true).build();
            (p.clone(), glob)
        });
        glob_set("public path pattern", always.chain(listed)).map(PublicPaths)
    }

    pub fn contains(&self, path: &str) -> bool {
        self.0.is_match(path)
    }
}

/// Middleware, installed only when keys are configured (without keys no request carries a
/// [`Caller`], and every skill is allowed): public paths pass as [`Caller::Anonymous`]; others
/// need a valid bearer key.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let keys = &state.config.keys;
    // The console logs in with a key into its own cookie and checks it on every page.
    if super::console::serves(req.uri().path()) {
        return next.run(req).await;
    }
    let caller = if state.public.contains(req.uri().path()) {
        Caller::Anonymous
    } else {
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let Some(presented) = presented else {
            // A browser cannot put a header on a WebSocket: the socket authenticates with its
            // first frame instead (see `gateway::ws`).
            let path = req.uri().path();
            if state.doors.iter().any(|d| d.authenticates_in_band(path)) {
                return next.run(req).await;
            }
            return GatewayError::Unauthorized { presented: false }.into_response();
        };
        match keys.verify(presented) {
            Some(key) => Caller::Key(key.clone()),
            None => return GatewayError::Unauthorized { presented: true }.into_response(),
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110, section 11.1).
pub(crate) fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The rate limiter's key: the API key's name, else the client address.
#[derive(Debug, Clone, Copy)]
pub struct CallerKey;

impl tower_governor::key_extractor::KeyExtractor for CallerKey {
    type Key = String;

    fn extract<T>(
        &self,
        req: &axum::http::Request<T>,
    ) -> Result<Self::Key, tower_governor::GovernorError> {
        if let Some(Caller::Key(key)) = req.extensions().get::<Caller>() {
            return Ok(format!("key:{}", key.name));
        }
        // The client behind a trusted proxy, else the TCP peer.
        // (an IPv6 client by its /64 network, as the per-address caps count it).
        let client_of = crate::gateway::peers::client_of;
        if let Some(client) = req.extensions().get::<crate::gateway::peers::ClientAddr>() {
            return Ok(format!("ip:{}", client_of(client.0)));
        }
        Ok(req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(
                || "anonymous".to_string(),
                |c| format!("ip:{}", client_of(c.0.ip())),
            ))
    }
}
