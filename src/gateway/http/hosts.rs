//! The `Host` allow-list: with `allowed-hosts` set, a request addressed to any other host (a
//! DNS-rebinding page, a misrouted proxy) gets 421. Bound to loopback without the setting, only
//! loopback names are served (`localhost`, `127.0.0.1`, `[::1]`): a page on `evil.example`
//! whose name was made to resolve to 127.0.0.1 reaches the port but is not served. `/healthz`
//! and `/readyz` answer any host, so orchestrators can still probe the server by its address.

use std::str::FromStr;

use axum::extract::Request;
use axum::http::header;
use axum::http::uri::Authority;
use axum::response::{IntoResponse, Response};

use crate::gateway::GatewayError;
use crate::gateway::http::state::AppState;

/// Paths that answer whatever host they were sent to.
const ANY_HOST: [&str; 2] = ["/healthz", "/readyz"];

/// One allowed host: a name (`*.example.com` for any subdomain), and a port if given.
#[derive(Debug, Clone)]
struct Allowed {
    name: String,
    port: Option<u16>,
}

#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Vec<Allowed>);

/// An `allowed-hosts` entry that is not a host.
#[derive(Debug, thiserror::Error)]
#[error("allowed host `{0}` is not a host name")]
pub struct BadHost(pub String);

impl AllowedHosts {
    /// `entries` are `name`, `name:port`, `*.domain` or `[v6]:port`; empty allows any host.
    pub fn new(entries: &[String]) -> Result<AllowedHosts, BadHost> {
        let mut allowed = Vec::new();
        for entry in entries {
            let (wildcard, rest) = match entry.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, entry.as_str()),
            };
            let authority = Authority::from_str(rest)
                .ok()
                .filter(|a| !a.as_str().contains('@'))
                .ok_or_else(|| BadHost(entry.clone()))?;
            let name = normalize(authority.host());
            allowed.push(Allowed {
                name: if wildcard { format!("*.{name}") } else { name },
                port: authority.port_u16(),
            });
        }
        Ok(AllowedHosts(allowed))
    }

    /// The names a server bound to loopback answers to, on any port.
    pub fn loopback() -> AllowedHosts {
        let names = ["localhost", "127.0.0.1", "[::1]"].map(String::from);
        AllowedHosts::new(&names).expect("valid host names")
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when a request for `authority` (a `Host` header) may be served.
    pub fn allows(&self, authority: &str) -> bool {
        let Some(authority) = Authority::from_str(authority)
            .ok()
            .filter(|a| !a.as_str().contains('@'))
        else {
            return false;
        };
        let host = normalize(authority.host());
        self.0.iter().any(|a| {
            let name = match a.name.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                None => host == a.name,
            };
            name && a.port.is_none_or(|port| authority.port_u16() == Some(port))
        })
    }
}

/// Lower case, without the trailing dot of a fully qualified name.
fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The answer to a request addressed to a host the server does not serve (421); `None` when it
/// may be served. Asked by the outermost layer (`request_id::track`), so a refusal has its
/// request id and metrics, without a layer of its own (each layer costs every request a clone of
/// the stack beneath it and a boxed future).
pub fn refusal(state: &AppState, req: &Request) -> Option<Response> {
    if state.hosts.is_empty() || ANY_HOST.contains(&req.uri().path()) {
        return None;
    }
    // HTTP/2 carries the host in the request's authority, HTTP/1.1 in `Host`.
    let host = match req.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => req
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok()),
    };
    match host {
        Some(host) if state.hosts.allows(host) => None,
        host => Some(
            GatewayError::Misdirected {
                host: host.map(str::to_string),
            }
            .into_response(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::AllowedHosts;

    #[test]
    fn hosts_match_by_name_case_and_port_and_wildcards_match_subdomains_only() {
        let hosts = AllowedHosts::new(&[
            "api.example.com".into(),
            "localhost:8080".into(),
            "*.apps.example".into(),
        ])
        .unwrap();
        assert!(hosts.allows("API.example.com"));
        assert!(hosts.allows("api.example.com:443"));
        assert!(hosts.allows("api.example.com."));
        assert!(hosts.allows("localhost:8080"));
        assert!(!hosts.allows("localhost:9090"));
        assert!(!hosts.allows("localhost"));
        assert!(hosts.allows("one.apps.example"));
        assert!(!hosts.allows("apps.example"));
        assert!(!hosts.allows("evilapps.example"));
        assert!(!hosts.allows("evil.example"));
        assert!(!hosts.allows("user@api.example.com"));
        assert!(AllowedHosts::new(&["not a host".into()]).is_err());
    }

    #[test]
    fn the_loopback_default_serves_loopback_names_on_any_port_and_nothing_else() {
        let hosts = AllowedHosts::loopback();
        for host in [
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:9",
            "LOCALHOST",
            "localhost.",
        ] {
            assert!(hosts.allows(host), "{host}");
        }
        for host in [
            "evil.example:8080",
            "127.0.0.2:8080",
            "localhost.evil.example",
            "0.0.0.0",
        ] {
            assert!(!hosts.allows(host), "{host}");
        }
    }
}
