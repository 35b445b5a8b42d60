//! The web session cookie: `skillgate_session` carries an id the server issued and signed, that
//! web route handlers get as `sessionId`, and that names the conversation (`web:<id>`) the
//! `session` middleware keeps and the anonymous visitor (the principal `web:<id>`).
//!
//! The cookie is `<id>.<epoch>.<signature>`: 128 random bits, the signing period, and an
//! HMAC-SHA256 over both with that period's secret. Secrets live in the event store (claimed
//! once per period across every replica, see [`SessionSecrets`]), not in the API keys, so a
//! rotation of keys leaves sessions alone. A new period starts every [`PERIOD_MS`]; a cookie of
//! the period before is still taken for [`GRACE_MS`] after the change and signed again with the
//! new secret (the same id, so the conversation goes on). A cookie the server did not issue (an
//! id of the visitor's choosing, a bad signature, an old period) is replaced by a new id.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::events::{EventStore, KeyClaim};

/// The cookie's name.
pub const COOKIE: &str = "skillgate_session";
/// How long one signing secret is used: 30 days.
pub const PERIOD_MS: u64 = 30 * 24 * 3600 * 1000;
/// How long after a rotation a cookie signed with the previous secret is still taken.
pub const GRACE_MS: u64 = 24 * 3600 * 1000;

/// The signing secrets of every period in use, shared by the replicas through the store.
pub struct SessionSecrets {
    store: Arc<dyn EventStore>,
    known: Mutex<HashMap<u64, Arc<[u8; 32]>>>,
}

impl SessionSecrets {
    pub fn new(store: Arc<dyn EventStore>) -> SessionSecrets {
        SessionSecrets {
            store,
            known: Mutex::default(),
        }
    }

    /// The secret of `epoch`: the first replica to ask makes it (a claim on the store, kept two
    /// periods); the others read the one it made.
    pub(crate) async fn secret(&self, epoch: u64) -> Option<Arc<[u8; 32]>> {
        if let Some(found) = self.known.lock().get(&epoch) {
            return Some(found.clone());
        }
        let fresh = crate::context::id::random_hex128() + &crate::context::id::random_hex128();
        let ttl = Duration::from_millis(2 * PERIOD_MS + GRACE_MS);
        let key = format!("gateway-session-secret:{epoch}");
        let text = match self.store.claim_key(&key, &fresh, ttl).await {
            Ok(KeyClaim::Won) => fresh,
            Ok(KeyClaim::Held { fingerprint, .. }) => fingerprint,
            Err(err) => {
                tracing::warn!("the session secret could not be read from the store: {err}");
                return None;
            }
        };
        let secret: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let secret = Arc::new(secret);
        let mut known = self.known.lock();
        known.retain(|e, _| *e + 1 >= epoch);
        known.insert(epoch, secret.clone());
        Some(secret)
    }
}

/// The session of one request: its id, and the cookie the response must set, if any.
pub struct WebSession {
    pub id: String,
    cookie: Option<String>,
}

fn sign(secret: &[u8; 32], id: &str, epoch: u64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(format!("{id}.{epoch}").as_bytes());
    let bytes = mac.finalize().into_bytes();
    crate::digest::hex(&bytes[..16])
}

impl WebSession {
    /// The request's session from its cookie when the server issued it, or a new one.
    pub async fn of(secrets: &SessionSecrets, headers: &HeaderMap, now_ms: u64) -> WebSession {
        let epoch = now_ms / PERIOD_MS;
        if let Some((id, their_epoch, signature)) = from_cookie(headers) {
            let in_grace = their_epoch + 1 == epoch && now_ms - epoch * PERIOD_MS < GRACE_MS;
            if (their_epoch == epoch || in_grace)
                && let Some(secret) = secrets.secret(their_epoch).await
                && bool::from(
                    sign(&secret, &id, their_epoch)
                        .as_bytes()
                        .ct_eq(signature.as_bytes()),
                )
            {
                // Signed again with this period's secret after a rotation.
                let cookie = match their_epoch == epoch {
                    true => None,
                    false => secrets
                        .secret(epoch)
                        .await
                        .map(|s| format!("{id}.{epoch}.{}", sign(&s, &id, epoch))),
                };
                return WebSession { id, cookie };
            }
        }
        let id = crate::context::id::random_hex128();
        let cookie = secrets
            .secret(epoch)
            .await
            .map(|s| format!("{id}.{epoch}.{}", sign(&s, &id, epoch)));
        WebSession { id, cookie }
    }

    /// The conversation key for the gateway (`nonlocals.gateway.sessionId`).
    pub fn conversation(&self) -> String {
        format!("web:{}", self.id)
    }

    /// The `Set-Cookie` header for a new or re-signed session: script cannot read it, and it is
    /// not sent on cross-site subrequests; `secure` when served over TLS.
    pub fn set_cookie(&self, secure: bool) -> Option<HeaderValue> {
        let value = self.cookie.as_ref()?;
        let secure = if secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Lax{secure}"
        ))
        .ok()
    }
}

/// The value of the request's cookie `name`, trimmed.
pub(crate) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.trim().to_string())
}

/// The id, period and signature in the request's cookie, if it has the shape of one skillgate
/// gives; anything else is ignored.
fn from_cookie(headers: &HeaderMap) -> Option<(String, u64, String)> {
    let value = cookie_value(headers, COOKIE)?;
    let mut parts = value.split('.');
    let (id, epoch, signature) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if parts.next().is_some() || !hex(id, 32) || !hex(signature, 32) {
        return None;
    }
    Some((id.to_string(), epoch.parse().ok()?, signature.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Limits;
    use crate::events::memory::MemoryStore;

    fn secrets() -> SessionSecrets {
        SessionSecrets::new(Arc::new(MemoryStore::new(Limits::default())))
    }

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={value}")).unwrap(),
        );
        headers
    }

    /// The cookie value a response set.
    fn issued(session: &WebSession) -> String {
        let header = session.set_cookie(false).unwrap();
        let text = header.to_str().unwrap();
        text.strip_prefix(&format!("{COOKIE}="))
            .and_then(|t| t.split(';').next())
            .unwrap()
            .to_string()
    }

    #[tokio::test]
    async fn an_issued_cookie_is_kept_and_one_the_server_did_not_issue_is_replaced() {
        let secrets = secrets();
        let now = 5 * PERIOD_MS + 3 * GRACE_MS;
        let first = WebSession::of(&secrets, &HeaderMap::new(), now).await;
        let cookie = issued(&first);
        let again = WebSession::of(&secrets, &with_cookie(&cookie), now).await;
        assert_eq!(again.id, first.id);
        assert!(again.set_cookie(false).is_none());
        // An id of the visitor's choosing, with or without a made-up signature.
        let chosen = "0123456789abcdef0123456789abcdef";
        for forged in [
            chosen.to_string(),
            format!("{chosen}.5.0123456789abcdef0123456789abcdef"),
        ] {
            let s = WebSession::of(&secrets, &with_cookie(&forged), now).await;
            assert_ne!(s.id, chosen);
            assert!(s.set_cookie(false).is_some());
        }
    }

    #[tokio::test]
    async fn after_a_rotation_the_previous_secret_is_taken_for_a_day_then_not() {
        let secrets = secrets();
        let before = 6 * PERIOD_MS - 1000;
        let first = WebSession::of(&secrets, &HeaderMap::new(), before).await;
        let cookie = issued(&first);
        let soon = WebSession::of(&secrets, &with_cookie(&cookie), 6 * PERIOD_MS + 1000).await;
        assert_eq!(soon.id, first.id, "within the day after the rotation");
        assert!(
            issued(&soon).starts_with(&format!("{}.6.", first.id)),
            "signed again"
        );
        let late = WebSession::of(
            &secrets,
            &with_cookie(&cookie),
            6 * PERIOD_MS + GRACE_MS + 1,
        )
        .await;
        assert_ne!(late.id, first.id, "past the day");
    }
}
