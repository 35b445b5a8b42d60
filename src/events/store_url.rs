//! What an event store URL names: `memory`, `sqlite://<file>` (the default,
//! `.skillgate/events.db` in the project), or `postgres://...`.

use std::path::{Path, PathBuf};

use crate::events::store::{StoreError, StoreResult};

/// The store URL used when none is configured.
pub const DEFAULT_STORE: &str = "sqlite://.skillgate/events.db";

/// The store a URL names.
pub(crate) enum StoreUrl<'a> {
    Memory,
    /// A SQLite file (relative paths taken from the project); `full` for `?synchronous=full`.
    Sqlite {
        path: PathBuf,
        full: bool,
    },
    Postgres(&'a str),
}

/// Reads `url`; relative SQLite paths are taken from `project`.
pub(crate) fn parse<'a>(url: &'a str, project: &Path) -> StoreResult<StoreUrl<'a>> {
    if url == "memory" || url == "memory://" {
        return Ok(StoreUrl::Memory);
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        let (path, full) = match path.strip_suffix("?synchronous=full") {
            Some(p) => (p, true),
            None => (path, false),
        };
        return Ok(StoreUrl::Sqlite {
            path: project.join(path),
            full,
        });
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(StoreUrl::Postgres(url));
    }
    Err(StoreError::Invalid(format!(
        "unknown event store `{url}`: use `memory`, `sqlite://<file>` or `postgres://...`"
    )))
}
