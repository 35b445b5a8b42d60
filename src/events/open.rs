//! Opens the event store a URL names (see [`crate::events::store_url`]).

use std::path::Path;
use std::sync::Arc;

use crate::events::memory::MemoryStore;
use crate::events::postgres::PostgresStore;
use crate::events::sqlite::SqliteStore;
use crate::events::store::{EventStore, Limits, StoreResult};
use crate::events::store_url::{StoreUrl, parse};

/// Opens (and migrates) the store `url` names; relative SQLite paths are taken from `project`.
pub async fn open_store(
    url: &str,
    project: &Path,
    limits: Limits,
) -> StoreResult<Arc<dyn EventStore>> {
    Ok(match parse(url, project)? {
        StoreUrl::Memory => Arc::new(MemoryStore::new(limits)),
        StoreUrl::Sqlite { path, full } => Arc::new(SqliteStore::open(&path, limits, full).await?),
        StoreUrl::Postgres(url) => Arc::new(PostgresStore::connect(url, None, limits).await?),
    })
}
