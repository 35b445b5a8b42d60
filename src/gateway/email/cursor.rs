//! Where an IMAP folder was read up to: its UIDVALIDITY and the last UID taken, kept in the
//! event store's key table (SQLite or Postgres), so a restart or another replica goes on from
//! there instead of missing or repeating mail.

use std::sync::Arc;
use std::time::Duration;

use crate::events::{Bus, KeyClaim};

/// Kept as long as the store keeps anything.
const KEEP: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A folder's UIDVALIDITY and the last UID taken from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub validity: u32,
    pub uid: u32,
}

/// The remembered position of one folder of one account on one server.
pub struct Cursor {
    bus: Arc<Bus>,
    key: String,
}

impl Cursor {
    pub fn new(bus: Arc<Bus>, host: &str, user: &str, folder: &str) -> Cursor {
        let mailbox = format!("{host}\n{user}\n{folder}");
        Cursor {
            bus,
            key: format!(
                "email-imap-cursor:{}",
                crate::digest::sha256_hex(mailbox.as_bytes())
            ),
        }
    }

    /// The remembered position, `None` the first time.
    pub async fn load(&self) -> Result<Option<Position>, String> {
        let store = self.bus.store();
        match store
            .claim_key(&self.key, "imap-cursor", KEEP)
            .await
            .map_err(|e| e.to_string())?
        {
            KeyClaim::Won => Ok(None),
            KeyClaim::Held { response, .. } => Ok(response.as_deref().and_then(parse)),
        }
    }

    /// Remembers `position` (after its mail is queued). Call [`Cursor::load`] first: it makes
    /// the key this updates.
    pub async fn save(&self, position: Position) -> Result<(), String> {
        let value = format!("{}:{}", position.validity, position.uid);
        self.bus
            .store()
            .settle_key(&self.key, &value, KEEP)
            .await
            .map_err(|e| e.to_string())
    }
}

fn parse(value: &str) -> Option<Position> {
    let (validity, uid) = value.split_once(':')?;
    Some(Position {
        validity: validity.parse().ok()?,
        uid: uid.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_back_as_written() {
        assert_eq!(
            parse("1795462618:42"),
            Some(Position {
                validity: 1_795_462_618,
                uid: 42
            })
        );
        assert_eq!(parse("garbage"), None);
    }
}
