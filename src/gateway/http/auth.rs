//! API keys: stored as SHA-256 hashes, presented as `Authorization: Bearer <key>`; which paths
//! are public; the per-caller key the rate limiter counts by. Which skills a key may invoke is
//! its [`Scope`], decided by the gateway's policy.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use globset::{Glob, GlobBuilder, GlobSet};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::gateway::GatewayError;
use crate::gateway::http::state::AppState;
use crate::gateway::policy::access::glob_set;
use crate::gateway::policy::{PatternError, Scope};
use crate::kernel::authority::{Grants, Principal};

/// One configured key: a name (for logs, metrics and rate limits), the hash, and the skills it
/// may invoke.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub name: String,
    hash: [u8; 32],
    scope: Scope,
    /// Who a request with this key runs for: `key:<name>`, with its skills, topics and admin.
    principal: Principal,
    skills: Vec<String>,
}

/// A key that cannot be used as configured, or a new one that cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "key `{name}`: the hash must start with `{HASH_PREFIX}` (store hashes, never keys; `skillgate keys new` makes one)"
    )]
    NotAHash { name: String },
    #[error("key `{name}`: `{HASH_PREFIX}` must be followed by 64 hex digits")]
    BadDigest { name: String },
    #[error("key `{name}`: {source}")]
    Skills { name: String, source: PatternError },
    #[error("key `{name}`: {message}")]
    Grants { name: String, message: String },
    #[error("two API keys are named `{0}`")]
    Duplicate(String),
    #[error("no randomness available: {0}")]
    NoRandomness(getrandom::Error),
}

/// The prefix of a stored key hash.
pub const HASH_PREFIX: &str = "sha256:";

impl ApiKey {
    /// `hash` is `sha256:<64 hex digits>` (see `skillgate keys new`).
    /// `skills` are name globs; none is every skill.
    pub fn new(name: &str, hash: &str, skills: Vec<String>) -> Result<ApiKey, KeyError> {
        let hex = hash
            .trim()
            .strip_prefix(HASH_PREFIX)
            .ok_or_else(|| KeyError::NotAHash { name: name.into() })?;
        let bytes = decode_hex(hex).ok_or_else(|| KeyError::BadDigest { name: name.into() })?;
        let scope = Scope::new(&skills).map_err(|source| KeyError::Skills {
            name: name.into(),
            source,
        })?;
        let mut key = ApiKey {
            name: name.to_string(),
            hash: bytes,
            scope,
            principal: Principal::local(),
            skills,
        };
        key = key.with_grants(None, false)?;
        Ok(key)
    }

    /// Sets the topics the key may read and emit on (`None`: every non-reserved topic for a
    /// key with every skill, none for a key limited to some) and whether it has `admin`.
    pub fn with_grants(
        mut self,
        topics: Option<Vec<String>>,
        admin: bool,
    ) -> Result<ApiKey, KeyError> {
        let skills = (!self.skills.is_empty()).then_some(self.skills.as_slice());
        let topics = topics.or_else(|| skills.map(|_| Vec::new()));
        let grants =
            Grants::new(skills, topics.as_deref(), admin).map_err(|e| KeyError::Grants {
                name: self.name.clone(),
                message: e.message().to_string(),
            })?;
        self.principal = Principal::key(&self.name, grants);
        Ok(self)
    }

    /// The skills this key may invoke.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Who a request with this key runs for.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
}

fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// `sha256:<hex>` of a key, as stored in configuration.
pub fn hash_key(key: &str) -> String {
    format!("{HASH_PREFIX}{}", crate::digest::sha256_hex(key.as_bytes()))
}

/// A new random key: `sg_` and 40 hex digits (160 bits).
pub fn generate_key() -> Result<String, KeyError> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes).map_err(KeyError::NoRandomness)?;
    Ok(format!("sg_{}", crate::digest::hex(&bytes)))
}

/// Every configured key. Empty means authentication is off.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    keys: Arc<Vec<Arc<ApiKey>>>,
}

impl KeyRing {
    pub fn new(keys: Vec<ApiKey>) -> Result<KeyRing, KeyError> {
        for (i, key) in keys.iter().enumerate() {
            if keys[..i].iter().any(|k| k.name == key.name) {
                return Err(KeyError::Duplicate(key.name.clone()));
            }
        }
        Ok(KeyRing {
            keys: Arc::new(keys.into_iter().map(Arc::new).collect()),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The key whose hash matches `presented`, compared in constant time.
    pub fn verify(&self, presented: &str) -> Option<&Arc<ApiKey>> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for key in self.keys.iter() {
            if bool::from(key.hash.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        found
    }
}

/// Who is calling, put on the request by [`authenticate`].
#[derive(Debug, Clone)]
pub enum Caller {
    /// A public path.
    Anonymous,
    /// Shared with the key ring: a request costs one reference count, not a copy.
    Key(Arc<ApiKey>),
}

impl Caller {
    /// Who a request runs for: its key's principal; the one local caller when keys are off; an
    /// anonymous web visitor on a public path (no topics, no admin).
    pub fn principal(caller: Option<&Caller>) -> Principal {
        match caller {
            Some(Caller::Key(key)) => key.principal().clone(),
            Some(Caller::Anonymous) => anonymous(),
            None => Principal::local(),
        }
    }

    /// The skills `caller` may invoke. Without a caller (authentication is off) and on a public
    /// path, every skill is in scope.
    pub fn scope(caller: Option<&Caller>) -> &Scope {
        match caller {
            Some(Caller::Key(key)) => key.scope(),
            Some(Caller::Anonymous) | None => Scope::all(),
        }
    }
}

/// An anonymous visitor of a public path: every public skill, no topic, no admin.
fn anonymous() -> Principal {
    static ANONYMOUS: std::sync::OnceLock<Principal> = std::sync::OnceLock::new();
    ANONYMOUS
        .get_or_init(|| {
            Principal::peer(
                "web:anonymous",
                Grants::new(None, Some(&[]), false).unwrap_or_default(),
            )
        })
        .clone()
}

/// Looks keys up by name for stored work (see `kernel::authority::KeyDirectory`).
impl crate::kernel::authority::KeyDirectory for KeyRing {
    fn lookup(&self, name: &str) -> Option<Principal> {
        self.keys
            .iter()
            .find(|k| k.name == name)
            .map(|k| k.principal.clone())
    }
}

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
        if let Some(client) = req
            .extensions()
            .get::<crate::gateway::http::peers::ClientAddr>()
        {
            return Ok(format!("ip:{}", client.0));
        }
        Ok(req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "anonymous".to_string(), |c| format!("ip:{}", c.0.ip())))
    }
}
