//! The event store's schema migrations: the embedded sets for SQLite and Postgres, and which of
//! them a database has not applied yet (`skillgate migrate --check`), read without changing it.
//!
//! Applying is safe with many replicas starting at once: on Postgres the migrator holds a
//! session advisory lock for the whole run, so one process applies and the others find the
//! work done; on SQLite the file's write lock serializes them.

use std::path::Path;

use sqlx::migrate::Migrator;
use sqlx::{Connection, Row};

use crate::events::store::{StoreError, StoreResult};

/// The Postgres migrations, embedded in the binary.
pub static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");
/// The SQLite migrations, embedded in the binary.
pub static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");

/// A migration the database has not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub version: i64,
    pub description: String,
}

impl std::fmt::Display for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04} {}", self.version, self.description)
    }
}

/// The migrations the store `url` names has not applied, oldest first; nothing is created or
/// changed (a SQLite file that does not exist yet has every migration pending). The memory
/// store has none.
pub async fn pending(url: &str, project: &Path) -> StoreResult<Vec<Pending>> {
    if url == "memory" || url == "memory://" {
        return Ok(Vec::new());
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = project.join(path.strip_suffix("?synchronous=full").unwrap_or(path));
        if !path.exists() {
            return Ok(not_in(&SQLITE, &[]));
        }
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
        let exists: Option<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_optional(&mut conn)
        .await?;
        let applied = match exists {
            Some(_) => applied_versions(&mut conn).await?,
            None => Vec::new(),
        };
        conn.close().await?;
        return Ok(not_in(&SQLITE, &applied));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut conn)
            .await?;
        let applied = if exists {
            let rows = sqlx::query("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&mut conn)
                .await?;
            rows.iter().map(|r| r.get::<i64, _>(0)).collect()
        } else {
            Vec::new()
        };
        conn.close().await?;
        return Ok(not_in(&POSTGRES, &applied));
    }
    Err(StoreError::Invalid(format!(
        "unknown event store `{url}`: use `memory`, `sqlite://<file>` or `postgres://...`"
    )))
}

async fn applied_versions(conn: &mut sqlx::SqliteConnection) -> StoreResult<Vec<i64>> {
    let rows = sqlx::query("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(conn)
        .await?;
    Ok(rows.iter().map(|r| r.get::<i64, _>(0)).collect())
}

/// The migrations of `set` whose version is not in `applied`.
fn not_in(set: &Migrator, applied: &[i64]) -> Vec<Pending> {
    set.iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| Pending {
            version: m.version,
            description: m.description.to_string(),
        })
        .collect()
}
