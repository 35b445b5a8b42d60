//! Where the tests keep events: [`Backend`], a store opened in the test's process (memory,
//! SQLite in a temporary folder, Postgres in a schema of its own), and [`Store`], a database
//! the `skillgate` command line is pointed at.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use skillgate::events::memory::MemoryStore;
use skillgate::events::postgres::PostgresStore;
use skillgate::events::sqlite::SqliteStore;
use skillgate::events::{Bus, BusConfig, EventStore, Limits};

/// Where a store's data lives, so a test can open a second store on the same data.
pub enum Backend {
    Memory(Mutex<Option<Arc<MemoryStore>>>),
    Sqlite(tempfile::TempDir),
    Postgres { url: String, schema: String },
}

impl Backend {
    pub fn memory() -> Option<Backend> {
        Some(Backend::Memory(Mutex::new(None)))
    }

    pub fn sqlite() -> Option<Backend> {
        Some(Backend::Sqlite(tempfile::tempdir().expect("temp dir")))
    }

    /// `None` (skip) when no Postgres is configured, unless the run requires it.
    pub fn postgres() -> Option<Backend> {
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => Some(Backend::Postgres {
                url,
                schema: format!(
                    "t{}",
                    skillgate::context::id::format(skillgate::context::id::next_id())
                ),
            }),
            _ if std::env::var("SKILLGATE_REQUIRE_PG").is_ok() => {
                panic!("SKILLGATE_REQUIRE_PG is set but DATABASE_URL is not")
            }
            _ => {
                eprintln!("skipped: DATABASE_URL is not set (scripts/test sets it)");
                None
            }
        }
    }

    pub async fn open(&self, limits: Limits) -> Arc<dyn EventStore> {
        match self {
            Backend::Memory(slot) => {
                let mut slot = slot.lock();
                slot.get_or_insert_with(|| Arc::new(MemoryStore::new(limits)))
                    .clone()
            }
            Backend::Sqlite(dir) => Arc::new(
                SqliteStore::open(&dir.path().join("events.db"), limits, false)
                    .await
                    .expect("open sqlite"),
            ),
            Backend::Postgres { url, schema } => Arc::new(
                PostgresStore::connect(url, Some(schema), limits)
                    .await
                    .expect("connect postgres"),
            ),
        }
    }

    pub async fn bus(&self, limits: Limits, visibility: Duration) -> Arc<Bus> {
        Arc::new(Bus::new(
            self.open(limits).await,
            BusConfig::with_visibility(visibility),
        ))
    }

    pub async fn cleanup(&self) {
        if let Backend::Postgres { url, schema } = self
            && let Ok(pool) = sqlx::PgPool::connect(url).await
        {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&pool)
                .await;
        }
    }
}

/// Where the command line keeps events: the project's embedded SQLite file (`url` none), or a
/// Postgres database of its own, dropped with the value.
pub(crate) struct Store {
    pub(crate) url: Option<String>,
    admin: Option<(String, String)>,
}

impl Store {
    pub(crate) fn sqlite() -> Store {
        Store {
            url: None,
            admin: None,
        }
    }

    /// The embedded store, and a Postgres one when `DATABASE_URL` is set.
    pub(crate) fn all() -> Vec<Store> {
        let mut stores = vec![Store::sqlite()];
        if let Some(Backend::Postgres { url, schema }) = Backend::postgres() {
            let database = schema;
            admin_query(&url, &format!("CREATE DATABASE {database}"));
            let (base, _) = url.rsplit_once('/').expect("DATABASE_URL names a database");
            stores.push(Store {
                url: Some(format!("{base}/{database}")),
                admin: Some((url.clone(), database)),
            });
        }
        stores
    }

    pub(crate) fn name(&self) -> &str {
        if self.url.is_some() {
            "postgres"
        } else {
            "sqlite"
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some((url, database)) = &self.admin {
            admin_query(
                url,
                &format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
            );
        }
    }
}

pub(crate) fn admin_query(url: &str, sql: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let pool = sqlx::PgPool::connect(url)
            .await
            .expect("connect to DATABASE_URL");
        sqlx::query(sql).execute(&pool).await.expect(sql);
        pool.close().await;
    });
}
