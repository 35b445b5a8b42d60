//! The web session cookie: `skillgate_session` carries a random id that web route handlers
//! get as `sessionId`, and that names the conversation (`web:<id>`) the `session` middleware
//! keeps. A request without a valid one gets a new id and a `Set-Cookie` on its response.

use axum::http::{HeaderMap, HeaderValue, header};

/// The cookie's name.
pub const COOKIE: &str = "skillgate_session";

/// The session of one request: its id, and whether the response must set the cookie.
pub struct WebSession {
    pub id: String,
    pub new: bool,
}

impl WebSession {
    /// The request's session from its cookie, or a new one.
    pub fn of(headers: &HeaderMap) -> WebSession {
        match from_cookie(headers) {
            Some(id) => WebSession { id, new: false },
            None => WebSession {
                id: crate::context::id::random_hex128(),
                new: true,
            },
        }
    }

    /// The conversation key for the gateway (`nonlocals.gateway.sessionId`).
    pub fn conversation(&self) -> String {
        format!("web:{}", self.id)
    }

    /// The `Set-Cookie` header for a new session: script cannot read it, and it is not sent
    /// on cross-site subrequests; `secure` when served over TLS.
    pub fn set_cookie(&self, secure: bool) -> Option<HeaderValue> {
        if !self.new {
            return None;
        }
        let secure = if secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Lax{secure}",
            self.id
        ))
        .ok()
    }
}

/// The id in the request's cookie, if it has the shape of one skillgate gives (32 lowercase
/// hex digits); anything else is ignored, so a client cannot pick a readable name.
fn from_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|id| id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_cookie_is_kept_and_anything_else_gets_a_new_id() {
        let mut headers = HeaderMap::new();
        let id = "0123456789abcdef0123456789abcdef";
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={id}")).unwrap(),
        );
        let s = WebSession::of(&headers);
        assert_eq!((s.id.as_str(), s.new), (id, false));
        assert!(s.set_cookie(false).is_none());

        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("skillgate_session=slack:T1:C1:1.0"),
        );
        let s = WebSession::of(&headers);
        assert!(s.new);
        assert_ne!(s.id, "slack:T1:C1:1.0");
        assert_eq!(s.id.len(), 32);
        let cookie = s.set_cookie(true).unwrap();
        assert_eq!(
            cookie.to_str().unwrap(),
            format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Lax; Secure", s.id)
        );
    }
}
