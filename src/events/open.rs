//! Opens the event store a URL names: `memory`, `sqlite://<file>` (the default,
//! `.skillgate/events.db` in the project), or `postgres://...`.

use std::path::Path;
use std::sync::Arc;

use crate::events::memory::MemoryStore;
use crate::events::postgres::PostgresStore;
use crate::events::sqlite::SqliteStore;
use crate::events::store::{EventStore, Limits, StoreError, StoreResult};

/// The store URL used when none is configured.
pub const DEFAULT_STORE: &str = "sqlite://.skillgate/events.db";

/// Opens (and migrates) the store `url` names; relative SQLite paths are taken from `project`.
pub async fn open_store(
    url: &str,
    project: &Path,
    limits: Limits,
) -> StoreResult<Arc<dyn EventStore>> {
    if url == "memory" || url == "memory://" {
        return Ok(Arc::new(MemoryStore::new(limits)));
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        let (path, full) = match path.strip_suffix("?synchronous=full") {
            Some(p) => (p, true),
            None => (path, false),
        };
        let path = project.join(path);
        return Ok(Arc::new(SqliteStore::open(&path, limits, full).await?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresStore::connect(url, None, limits).await?));
    }
    Err(StoreError::Invalid(format!(
        "unknown event store `{url}`: use `memory`, `sqlite://<file>` or `postgres://...`"
    )))
}
