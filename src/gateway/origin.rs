//! Cross-site requests to `POST /invoke` and `/mcp`: a page on another site may not run skills
//! with the visitor's browser. Browsers say where a request comes from (`Sec-Fetch-Site`, `Origin`);
//! a request from another site is refused unless its origin is one of `--cors-origins`.
//! Clients that are not browsers (curl, SDKs, other servers) send neither and are not affected.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::gateway::GatewayError;

/// Middleware for services that do not check on their own (`/mcp`), with the `cors-origins`
/// as its state: a cross-site request is refused (403) before it reaches them.
pub async fn guard(
    State(cors_origins): State<Arc<[String]>>,
    req: Request,
    next: Next,
) -> Response {
    match refused(req.headers(), &cors_origins) {
        Some(why) => GatewayError::CrossSite(why).into_response(),
        None => next.run(req).await,
    }
}

/// Why the request is refused as cross-site, or `None` when it may go on.
pub fn refused(headers: &HeaderMap, cors_origins: &[String]) -> Option<String> {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    if let Some(origin) = origin
        && cors_origins.iter().any(|o| o == "*" || o == origin)
    {
        return None;
    }
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    if matches!(site.as_deref(), Some("cross-site" | "same-site")) {
        return Some(format!(
            "a request from another site (`Sec-Fetch-Site: {}`) may not invoke skills; add its origin to `cors-origins` to allow it",
            site.unwrap_or_default()
        ));
    }
    let origin = origin?;
    if origin == "null" || !same_host(origin, headers) {
        return Some(format!(
            "a request from the origin `{origin}` may not invoke skills; add it to `cors-origins` to allow it"
        ));
    }
    None
}

/// True when `origin` (`scheme://host[:port]`) names the host the request was sent to.
fn same_host(origin: &str, headers: &HeaderMap) -> bool {
    let Some(authority) = origin.split_once("://").map(|(_, rest)| rest) else {
        return false;
    };
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|host| host.eq_ignore_ascii_case(authority))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn non_browser_and_same_origin_requests_pass() {
        assert!(refused(&headers(&[("host", "a:8080")]), &[]).is_none());
        let same = headers(&[("host", "a:8080"), ("origin", "http://a:8080")]);
        assert!(refused(&same, &[]).is_none());
        let same_fetch = headers(&[("host", "a:8080"), ("sec-fetch-site", "same-origin")]);
        assert!(refused(&same_fetch, &[]).is_none());
    }

    #[test]
    fn other_origins_are_refused_unless_listed() {
        let other = headers(&[("host", "a:8080"), ("origin", "https://evil.example")]);
        assert!(refused(&other, &[]).is_some());
        assert!(refused(&other, &["https://evil.example".into()]).is_none());
        assert!(refused(&other, &["*".into()]).is_none());
        let fetch = headers(&[("host", "a:8080"), ("sec-fetch-site", "cross-site")]);
        assert!(refused(&fetch, &[]).is_some());
        let opaque = headers(&[("host", "a:8080"), ("origin", "null")]);
        assert!(refused(&opaque, &[]).is_some());
    }
}
