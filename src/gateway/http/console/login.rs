//! Who is at the console: a login cookie naming the key that logged in (or the local caller
//! when keys are off), signed with the server's session secret of its period (shared by the
//! replicas through the store) together with the key's fingerprint, so it ends when it expires
//! (eight hours), when the key is revoked and when the key is rotated; and the CSRF token each
//! of its forms carries, derived from the login.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::gateway::http::session_cookie::{PERIOD_MS, SessionSecrets, cookie_value};
use crate::gateway::keys::{ApiKey, Caller, KeyRing};
use crate::kernel::authority::Principal;

/// The cookie's name.
pub const COOKIE: &str = "skillgate_console";
/// How long a login lasts.
pub const LIFETIME_MS: u64 = 8 * 3600 * 1000;
/// What the cookie names for the local caller (no key name is empty).
const LOCAL: &str = "";

/// A login read from its cookie.
#[derive(Clone)]
pub struct Login {
    /// The key that logged in; `None`: the local caller, keys off.
    pub key: Option<Arc<ApiKey>>,
    /// What every form of this login carries (`csrf`).
    pub csrf: String,
}

impl Login {
    /// The caller the console acts as, as the API would see it.
    pub fn caller(&self) -> Option<Caller> {
        self.key.clone().map(Caller::Key)
    }

    pub fn principal(&self) -> Principal {
        Caller::principal(self.caller().as_ref())
    }

    pub fn admin(&self) -> bool {
        self.principal().admin()
    }

    /// Whether `given` is this login's CSRF token (compared in constant time).
    pub fn csrf_ok(&self, given: &str) -> bool {
        !given.is_empty() && bool::from(self.csrf.as_bytes().ct_eq(given.as_bytes()))
    }
}

fn mac(secret: &[u8; 32], parts: &[&str]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part.as_bytes());
        mac.update(b"\n");
    }
    crate::digest::hex(&mac.finalize().into_bytes()[..16])
}

/// A new login for `key` (`None`: the local caller): the cookie's value and the login.
pub async fn issue(
    secrets: &SessionSecrets,
    key: Option<&Arc<ApiKey>>,
    now_ms: u64,
) -> Option<(String, Login)> {
    let epoch = now_ms / PERIOD_MS;
    let secret = secrets.secret(epoch).await?;
    let name = key.map_or(LOCAL, |k| k.name.as_str());
    let fingerprint = key.map(|k| k.fingerprint()).unwrap_or_default();
    let expires = (now_ms + LIFETIME_MS).to_string();
    let nonce = crate::context::id::random_hex128();
    let epoch = epoch.to_string();
    let signature = mac(
        &secret,
        &["console", name, &fingerprint, &epoch, &expires, &nonce],
    );
    let value = format!("{}.{epoch}.{expires}.{nonce}.{signature}", hex_name(name));
    let login = Login {
        key: key.cloned(),
        csrf: mac(&secret, &["csrf", &nonce]),
    };
    Some((value, login))
}

/// The login of a request's cookie, if it is one this server (or a replica) signed, unexpired,
/// for a key that still exists unchanged (or for the local caller while keys are off).
pub async fn read(
    secrets: &SessionSecrets,
    keys: &KeyRing,
    headers: &HeaderMap,
    now_ms: u64,
) -> Option<Login> {
    let value = cookie_value(headers, COOKIE)?;
    let mut parts = value.split('.');
    let (name, epoch, expires, nonce, signature) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some() || expires.parse::<u64>().ok()? <= now_ms {
        return None;
    }
    let name = name_of_hex(name)?;
    let key = match name.as_str() {
        LOCAL if keys.is_empty() => None,
        LOCAL => return None,
        _ => Some(keys.named(&name)?.clone()),
    };
    let fingerprint = key.as_ref().map(|k| k.fingerprint()).unwrap_or_default();
    let secret = secrets.secret(epoch.parse().ok()?).await?;
    let expected = mac(
        &secret,
        &["console", &name, &fingerprint, epoch, expires, nonce],
    );
    if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
        return None;
    }
    Some(Login {
        key,
        csrf: mac(&secret, &["csrf", nonce]),
    })
}

/// Key names as hex, so no name can add a field to the cookie.
fn hex_name(name: &str) -> String {
    crate::digest::hex(name.as_bytes())
}

fn name_of_hex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The `Set-Cookie` of a login: for the console's paths only, unreadable by script, never sent
/// from another site's page.
pub fn set_cookie(value: &str, secure: bool) -> Option<HeaderValue> {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
        LIFETIME_MS / 1000
    ))
    .ok()
}

/// The `Set-Cookie` that ends a login.
pub fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static(
        "skillgate_console=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Limits;
    use crate::events::memory::MemoryStore;
    use crate::gateway::keys::hash_key;
    use axum::http::header;

    fn ring() -> KeyRing {
        KeyRing::new(vec![
            ApiKey::new("ops.team", &hash_key("sg_ops"), vec![]).unwrap(),
        ])
        .unwrap()
    }

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("other=1; {COOKIE}={value}").parse().unwrap(),
        );
        headers
    }

    #[tokio::test]
    async fn a_login_is_read_back_until_it_expires_and_only_as_signed() {
        let secrets = SessionSecrets::new(Arc::new(MemoryStore::new(Limits::default())));
        let keys = ring();
        let key = keys.named("ops.team").unwrap().clone();
        let (value, login) = issue(&secrets, Some(&key), 1_000).await.unwrap();
        let read_back = read(&secrets, &keys, &with_cookie(&value), 2_000)
            .await
            .unwrap();
        assert_eq!(read_back.key.unwrap().name, "ops.team");
        assert!(read_back.csrf == login.csrf && login.csrf_ok(&read_back.csrf));
        assert!(!login.csrf_ok("") && !login.csrf_ok("00"));
        let late = 1_000 + LIFETIME_MS;
        assert!(
            read(&secrets, &keys, &with_cookie(&value), late)
                .await
                .is_none()
        );
        // Another key's name put in its place breaks the signature.
        let forged = value.replacen(&hex_name("ops.team"), &hex_name("admin"), 1);
        assert!(
            read(&secrets, &keys, &with_cookie(&forged), 2_000)
                .await
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_login_ends_when_its_key_is_revoked_or_rotated_and_a_local_one_when_keys_are_on() {
        let secrets = SessionSecrets::new(Arc::new(MemoryStore::new(Limits::default())));
        let keys = ring();
        let key = keys.named("ops.team").unwrap().clone();
        let (value, _) = issue(&secrets, Some(&key), 1_000).await.unwrap();
        let rotated = KeyRing::new(vec![
            ApiKey::new("ops.team", &hash_key("sg_new"), vec![]).unwrap(),
        ])
        .unwrap();
        assert!(
            read(&secrets, &rotated, &with_cookie(&value), 2_000)
                .await
                .is_none()
        );
        assert!(
            read(&secrets, &KeyRing::default(), &with_cookie(&value), 2_000)
                .await
                .is_none()
        );
        let (local, _) = issue(&secrets, None, 1_000).await.unwrap();
        let off = read(&secrets, &KeyRing::default(), &with_cookie(&local), 2_000).await;
        assert!(off.unwrap().key.is_none());
        assert!(
            read(&secrets, &keys, &with_cookie(&local), 2_000)
                .await
                .is_none()
        );
    }
}
