//! Mail conversations the server can vouch for: a thread is known by the Message-IDs it took
//! from a sender and the ones it issued in its answers to that sender, recorded in the event
//! store under that sender's principal. A mail continues a thread only when it refers to one of
//! those; any other reference (someone else's Message-ID, a made-up one) starts a new thread,
//! so a sender cannot walk into a conversation by naming its Message-ID.

use std::time::Duration;

use crate::events::{EventStore, KeyClaim};

/// How long a Message-ID keeps its thread.
const KEPT: Duration = Duration::from_secs(90 * 24 * 3600);

fn key(principal: &str, message_id: &str) -> String {
    let digest = crate::digest::sha256_hex(format!("{principal}\0{message_id}").as_bytes());
    format!("email-thread:{digest}")
}

/// The thread of a mail from `principal` with `own` Message-ID that answers `answers` (its
/// In-Reply-To, then its References from the latest): the thread of the first of those recorded
/// for `principal`, else a new one named after `own`. `own` is recorded in it.
pub async fn of(
    store: &dyn EventStore,
    principal: &str,
    own: &str,
    answers: &[String],
) -> Result<String, String> {
    let mut thread = None;
    for id in answers {
        if id == own {
            continue;
        }
        if let Some(found) = lookup(store, principal, id).await? {
            thread = Some(found);
            break;
        }
    }
    let thread = thread.unwrap_or_else(|| own.to_string());
    remember(store, principal, own, &thread).await?;
    Ok(thread)
}

/// Records that `message_id` (a mail taken from `principal`, or one of our answers to it)
/// belongs to `thread`.
pub async fn remember(
    store: &dyn EventStore,
    principal: &str,
    message_id: &str,
    thread: &str,
) -> Result<(), String> {
    store
        .claim_key(&key(principal, message_id), thread, KEPT)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The thread `message_id` was recorded in for `principal`, if it was.
async fn lookup(
    store: &dyn EventStore,
    principal: &str,
    message_id: &str,
) -> Result<Option<String>, String> {
    // The store keeps keys as claims: a free key is claimed for a moment and given back.
    const PROBE: &str = "\0probe";
    let key = key(principal, message_id);
    match store.claim_key(&key, PROBE, KEPT).await {
        Ok(KeyClaim::Held { fingerprint, .. }) if fingerprint != PROBE => Ok(Some(fingerprint)),
        Ok(KeyClaim::Held { .. }) => Ok(None),
        Ok(KeyClaim::Won) => {
            store.release_key(&key).await.map_err(|e| e.to_string())?;
            Ok(None)
        }
        Err(e) => Err(e.to_string()),
    }
}
