//! The event store's schema migrations: the embedded sets for SQLite and Postgres, and which of
//! them a database has not applied yet (`skillgate migrate --check`), read without changing it.
//!
//! Applying is safe with many replicas starting at once: on Postgres the migrator holds a
//! session advisory lock for the whole run, so one process applies and the others find the
//! work done; on SQLite the file's write lock serializes them.

use std::path::Path;

use sqlx::Connection;
use sqlx::migrate::Migrator;

use crate::events::store::StoreResult;
use crate::events::store_url::{StoreUrl, parse};

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
    match parse(url, project)? {
        StoreUrl::Memory => Ok(Vec::new()),
        StoreUrl::Sqlite { path, .. } => {
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
                Some(_) => sqlx::query_scalar(APPLIED).fetch_all(&mut conn).await?,
                None => Vec::new(),
            };
            conn.close().await?;
            Ok(not_in(&SQLITE, &applied))
        }
        StoreUrl::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await?;
            let exists: bool =
                sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                    .fetch_one(&mut conn)
                    .await?;
            let applied = match exists {
                true => sqlx::query_scalar(APPLIED).fetch_all(&mut conn).await?,
                false => Vec::new(),
            };
            conn.close().await?;
            Ok(not_in(&POSTGRES, &applied))
        }
    }
}

/// The versions sqlx's migration table records as applied.
const APPLIED: &str = "SELECT version FROM _sqlx_migrations WHERE success";

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
