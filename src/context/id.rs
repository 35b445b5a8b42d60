//! Ids (contexts, requests, events): unique within the process and unpredictable from outside.
//!
//! An id is a keyed pseudo-random permutation of a counter: a four-round Feistel network over the
//! two 32-bit halves, whose round function is SipHash keyed from the operating system's random
//! source (std's `RandomState`). A permutation keeps ids unique (no birthday collisions); the
//! secret key means no number of ids seen reveals the next one, as an unkeyed mix of a counter
//! (which can be inverted) would.

use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);
/// One random key per round; made on first use.
static KEYS: OnceLock<[RandomState; 4]> = OnceLock::new();

/// A fresh id.
pub fn next_id() -> u64 {
    let keys = KEYS.get_or_init(|| std::array::from_fn(|_| RandomState::new()));
    permute(keys, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The Feistel network: a bijection on u64 for any keys.
fn permute(keys: &[RandomState; 4], n: u64) -> u64 {
    let (mut left, mut right) = ((n >> 32) as u32, n as u32);
    for key in keys {
        let mixed = key.hash_one(right) as u32;
        (left, right) = (right, left ^ mixed);
    }
    (u64::from(left) << 32) | u64::from(right)
}

/// `id` as 16 lowercase hex digits, leading zeros kept.
pub fn format(id: u64) -> String {
    crate::digest::hex(&id.to_be_bytes())
}

/// 128 bits from the operating system's random source, as 32 hex digits: for ids that outlive
/// the process and must not be guessed (web and WebSocket sessions).
pub fn random_hex128() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the system's random source");
    crate::digest::hex(&bytes)
}

/// Milliseconds since the Unix epoch as an RFC 3339 time (UTC), or null when out of range.
pub fn iso(ms: i64) -> serde_json::Value {
    use chrono::TimeZone;
    chrono::Utc
        .timestamp_millis_opt(ms)
        .single()
        .map_or(serde_json::Value::Null, |t| t.to_rfc3339().into())
}

/// Milliseconds since the Unix epoch (`Date.now()`).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_permutation_is_a_bijection_so_ids_never_repeat() {
        let keys: [RandomState; 4] = std::array::from_fn(|_| RandomState::new());
        let ids: HashSet<u64> = (0..100_000).map(|n| permute(&keys, n)).collect();
        assert_eq!(ids.len(), 100_000);
    }

    #[test]
    fn ids_are_unique() {
        let ids: HashSet<u64> = (0..10_000).map(|_| next_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert_eq!(format(next_id()).len(), 16);
    }

    #[test]
    fn an_id_is_formatted_as_sixteen_lowercase_hex_digits_leading_zeros_kept() {
        for id in [0, 1, 0xabc, 0x0123_4567_89ab_cdef, u64::MAX, next_id()] {
            assert_eq!(format(id), std::format!("{id:016x}"));
        }
        assert_eq!(format(0xfe), "00000000000000fe");
    }
}
