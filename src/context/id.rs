//! Context ids: unique, cheap to make, printed as 16 hex digits.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);
static SEED: OnceLock<u64> = OnceLock::new();

/// A fresh id. A bijective mix of a per-process seed and a counter: unique within the process,
/// and not guessable from the previous one.
pub fn next_id() -> u64 {
    let seed = *SEED.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        mix(nanos ^ u64::from(std::process::id()).rotate_left(32))
    });
    mix(seed.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed)))
}

/// splitmix64's finalizer: a bijection on u64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn format(id: u64) -> String {
    format!("{id:016x}")
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
    fn ids_are_unique() {
        let ids: HashSet<u64> = (0..10_000).map(|_| next_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert_eq!(format(next_id()).len(), 16);
    }
}
