//! API keys and callers: keys stored as SHA-256 hashes and found in constant time, the ring of
//! every configured key, and the [`Caller`] a door puts on a request once it has checked a key.
//! Every door that takes keys (HTTP, WebSocket, MCP, the operations listener) shares them; which
//! skills a key may invoke is its [`Scope`], decided by the gateway's policy.

use std::sync::Arc;

use arc_swap::ArcSwap;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

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
    /// Cancelled when a reload removes the key or changes it (its hash or grants): the streams
    /// it opened (WebSocket, SSE) close.
    revoked: CancellationToken,
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
            revoked: CancellationToken::new(),
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
    /// A short digest of the key's hash: what a login signed for this key names, so a login
    /// ends when the key is rotated under the same name.
    pub fn fingerprint(&self) -> String {
        crate::digest::hex(&self.hash[..8])
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Cancelled once a reload revokes the key: a stream opened with it ends there.
    pub fn revoked(&self) -> &CancellationToken {
        &self.revoked
    }

    /// The same key as configured: name, hash and grants.
    fn same_as(&self, other: &ApiKey) -> bool {
        self.name == other.name
            && bool::from(self.hash.ct_eq(&other.hash))
            && self.skills == other.skills
            && self.principal.same_grants(&other.principal)
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

    /// This ring put in place of `old` (a reload): a key configured as before stays the same
    /// key (its open streams go on); every other key of `old` is revoked.
    pub fn succeed(self, old: &KeyRing) -> KeyRing {
        let keys = self
            .keys
            .iter()
            .map(|key| match old.named(&key.name) {
                Some(kept) if kept.same_as(key) => kept.clone(),
                _ => key.clone(),
            })
            .collect::<Vec<_>>();
        for key in old.keys.iter() {
            if !keys.iter().any(|k| Arc::ptr_eq(k, key)) {
                key.revoked.cancel();
            }
        }
        KeyRing {
            keys: Arc::new(keys),
        }
    }

    /// The key named `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<ApiKey>> {
        self.keys.iter().find(|k| k.name == name)
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

/// The keys in force, shared by every door that checks them (and by stored work, as its
/// [`KeyDirectory`](crate::kernel::authority::KeyDirectory)), replaced whole by a reload.
#[derive(Debug, Clone, Default)]
pub struct LiveKeys(Arc<ArcSwap<KeyRing>>);

impl LiveKeys {
    pub fn new(ring: KeyRing) -> LiveKeys {
        LiveKeys(Arc::new(ArcSwap::from_pointee(ring)))
    }

    /// The ring in force now.
    pub fn current(&self) -> KeyRing {
        KeyRing::clone(&self.0.load())
    }

    /// Puts `ring` in force (see [`KeyRing::succeed`]: keys it changes or drops are revoked)
    /// and returns it as it now is.
    pub fn replace(&self, ring: KeyRing) -> KeyRing {
        let next = ring.succeed(&self.current());
        self.0.store(Arc::new(next.clone()));
        next
    }
}

impl crate::kernel::authority::KeyDirectory for LiveKeys {
    fn lookup(&self, name: &str) -> Option<Principal> {
        let ring = self.0.load();
        crate::kernel::authority::KeyDirectory::lookup(&**ring, name)
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
