//! How the SQLite store writes the runs record: on a connection of its own to the store's file,
//! whose `INSERT`s stay prepared, each row's text bound where the recorder's buffer holds it.
//!
//! Why not through sqlx like the rest of the store: sqlx copies every text value twice on its
//! way in (once to move the statement's values to the connection's thread, once more as SQLite
//! takes a private copy of each), then frees both; with a dozen values a run that was a third of
//! what the record cost a run (callgrind, `benches/runs-instructions`). Here SQLite reads the
//! text where it lies (`SQLITE_STATIC`) for as long as one statement runs, and the batch is
//! written on the thread the recorder's writer runs on, the store's own (`events::writer`),
//! without a trip to the connection's thread for each statement.
//!
//! The store's sqlx connection is held meanwhile, so nothing else of this process writes the
//! file at the same time (no wait in SQLite's busy handler); another process on the same file
//! waits through the same `busy_timeout` as the store's own connection does.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use async_trait::async_trait;
use libsqlite3_sys as ffi;
use parking_lot::Mutex;
use sqlx::SqlitePool;

use crate::events::records::NewRun;
use crate::events::run_blocks;
use crate::events::sql_records::{
    Dialect, RUNS_STATEMENTS, RunShape, RunValue, RunsStatement, RunsWriter, run_values,
    runs_statements,
};
use crate::events::store::{StoreError, StoreResult};

/// How long a write waits for another process's lock on the file (as the store's connection).
const BUSY_TIMEOUT_MS: c_int = 30_000;

/// The SQLite store's [`RunsWriter`]: the connection is opened at the first batch, and opened
/// again after a batch that failed.
pub struct SqliteRuns {
    /// The store's own connections: one is held while a batch is written.
    pool: SqlitePool,
    path: PathBuf,
    full_sync: bool,
    connection: Mutex<Option<RunsConnection>>,
}

impl SqliteRuns {
    pub fn new(pool: SqlitePool, path: &Path, full_sync: bool) -> SqliteRuns {
        SqliteRuns {
            pool,
            // Opened later: a relative path must still name the same file then.
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            full_sync,
            connection: Mutex::new(None),
        }
    }
}

#[async_trait]
impl RunsWriter for SqliteRuns {
    async fn put_runs(&self, runs: &[NewRun<'_>]) -> StoreResult<()> {
        if runs.is_empty() {
            return Ok(());
        }
        // The store's connection (its only one) is this process's turn at the file.
        let _turn = self.pool.acquire().await?;
        let mut connection = self.connection.lock();
        let open = match connection.take() {
            Some(open) => open,
            None => RunsConnection::open(&self.path, self.full_sync)?,
        };
        let open = connection.insert(open);
        let written = open.write(runs);
        if written.is_err() {
            // Whatever went wrong, the next batch starts on a fresh connection.
            *connection = None;
        }
        written
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        Some(crate::events::writer::handle())
    }
}

/// A connection to the store's file and its prepared `INSERT`s, one for each size of
/// [`RUNS_STATEMENTS`] and one of a block (each prepared when first used).
struct RunsConnection {
    db: NonNull<ffi::sqlite3>,
    inserts: [Option<NonNull<ffi::sqlite3_stmt>>; RUNS_STATEMENTS.len()],
    block: Option<NonNull<ffi::sqlite3_stmt>>,
    /// The value of the block being written, its memory kept from one to the next.
    packed: Vec<u8>,
}

// SAFETY: a SQLite connection may move between threads when one thread at a time uses it (the
// library is built thread-safe, and the connection is opened without a mutex of its own): this
// one is only reached through `SqliteRuns::connection`'s lock.
unsafe impl Send for RunsConnection {}

impl RunsConnection {
    fn open(path: &Path, full_sync: bool) -> StoreResult<RunsConnection> {
        let name = c_path(path).ok_or_else(|| {
            StoreError::Invalid(format!(
                "`{}` cannot be named to SQLite (a NUL byte, or not UTF-8)",
                path.display()
            ))
        })?;
        let mut db = ptr::null_mut();
        // SAFETY: `name` is a NUL-terminated string and `db` a place for the handle. A handle is
        // given even when opening fails; it is closed then.
        let opened = unsafe {
            ffi::sqlite3_open_v2(
                name.as_ptr(),
                &mut db,
                ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_NOMUTEX,
                ptr::null(),
            )
        };
        let Some(db) = NonNull::new(db) else {
            return Err(StoreError::Write(format!(
                "cannot open `{}` for the runs record: out of memory",
                path.display()
            )));
        };
        let connection = RunsConnection {
            db,
            inserts: [None; RUNS_STATEMENTS.len()],
            block: None,
            packed: Vec::new(),
        };
        if opened != ffi::SQLITE_OK {
            return Err(connection.error(&format!("cannot open `{}`", path.display())));
        }
        // SAFETY: `db` is open.
        unsafe { ffi::sqlite3_busy_timeout(db.as_ptr(), BUSY_TIMEOUT_MS) };
        connection.exec(if full_sync {
            c"PRAGMA synchronous = FULL"
        } else {
            c"PRAGMA synchronous = NORMAL"
        })?;
        Ok(connection)
    }

    /// Writes `runs` in one transaction: all of them, or none.
    fn write(&mut self, runs: &[NewRun<'_>]) -> StoreResult<()> {
        self.exec(c"BEGIN IMMEDIATE")?;
        let written = runs_statements(runs, RunShape::of)
            .try_for_each(|statement| match statement {
                RunsStatement::Rows { size, runs } => self.insert(size, runs),
                RunsStatement::Block(runs) => self.insert_block(runs),
            })
            .and_then(|()| self.exec(c"COMMIT"));
        if written.is_err() {
            // Nothing of the batch is kept (a failed `COMMIT` leaves the transaction open).
            let _ = self.exec(c"ROLLBACK");
        }
        written
    }

    /// Runs the `INSERT` of `RUNS_STATEMENTS[size]` rows on `chunk`.
    fn insert(&mut self, size: usize, chunk: &[NewRun<'_>]) -> StoreResult<()> {
        let insert = self.prepared(Statement::Rows(size))?.as_ptr();
        let mut bound = ffi::SQLITE_OK;
        let mut at: c_int = 0;
        for run in chunk {
            for value in run_values(run) {
                at += 1;
                // SAFETY: `insert` is a prepared statement of this connection with
                // `chunk.len() * RUN_COLUMNS` parameters. `SQLITE_STATIC` lets SQLite read the
                // text where it lies until the statement is reset and its values cleared, in
                // `step`, before this function returns, while `chunk` is still borrowed.
                bound |= unsafe {
                    match value {
                        RunValue::Text(Some(text)) => ffi::sqlite3_bind_text64(
                            insert,
                            at,
                            text.as_ptr().cast::<c_char>(),
                            text.len() as u64,
                            ffi::SQLITE_STATIC(),
                            ffi::SQLITE_UTF8 as u8,
                        ),
                        RunValue::Text(None) => ffi::sqlite3_bind_null(insert, at),
                        RunValue::Int(n) => ffi::sqlite3_bind_int64(insert, at, n),
                    }
                };
            }
        }
        self.step(insert, bound)
    }

    /// Runs the `INSERT` of one block of the plain runs `chunk`.
    fn insert_block(&mut self, chunk: &[NewRun<'_>]) -> StoreResult<()> {
        let insert = self.prepared(Statement::Block)?.as_ptr();
        let head = run_blocks::pack(chunk, &mut self.packed);
        // SAFETY: `insert` is this connection's block statement, of four parameters (the
        // order of `Dialect::block_insert`). `SQLITE_STATIC` lets SQLite read the block where
        // it lies until the statement is reset and its values cleared, in `step`, before
        // `self.packed` is written again.
        let bound = unsafe {
            ffi::sqlite3_bind_int64(insert, 1, head.first_ms)
                | ffi::sqlite3_bind_blob64(
                    insert,
                    2,
                    self.packed.as_ptr().cast(),
                    self.packed.len() as u64,
                    ffi::SQLITE_STATIC(),
                )
                | ffi::sqlite3_bind_int64(insert, 3, head.runs)
                | ffi::sqlite3_bind_int64(insert, 4, head.last_ms)
        };
        self.step(insert, bound)
    }

    /// Steps `insert` once if its values were bound (`bound`), then resets it and clears its
    /// values.
    fn step(&self, insert: *mut ffi::sqlite3_stmt, bound: c_int) -> StoreResult<()> {
        // SAFETY: `insert` is this connection's; stepped once (an `INSERT` returns no row), then
        // reset and its values cleared, so it holds no pointer into what it was given
        // afterwards.
        let stepped = unsafe {
            let stepped = if bound == ffi::SQLITE_OK {
                ffi::sqlite3_step(insert)
            } else {
                bound
            };
            ffi::sqlite3_reset(insert);
            ffi::sqlite3_clear_bindings(insert);
            stepped
        };
        match stepped {
            ffi::SQLITE_DONE => Ok(()),
            _ => Err(self.error("cannot record runs")),
        }
    }

    /// The prepared `INSERT` `statement`.
    fn prepared(&mut self, statement: Statement) -> StoreResult<NonNull<ffi::sqlite3_stmt>> {
        let kept = match statement {
            Statement::Rows(size) => &mut self.inserts[size],
            Statement::Block => &mut self.block,
        };
        if let Some(insert) = *kept {
            return Ok(insert);
        }
        let sql = match statement {
            Statement::Rows(size) => sqlx::Sqlite::runs_insert_of(size),
            Statement::Block => sqlx::Sqlite::block_insert(),
        };
        let mut insert = ptr::null_mut();
        // SAFETY: `sql` is valid for `sql.len()` bytes; the statement is kept (persistent) and
        // finalized when the connection is dropped.
        let prepared = unsafe {
            ffi::sqlite3_prepare_v3(
                self.db.as_ptr(),
                sql.as_ptr().cast::<c_char>(),
                sql.len() as c_int,
                ffi::SQLITE_PREPARE_PERSISTENT,
                &mut insert,
                ptr::null_mut(),
            )
        };
        match NonNull::new(insert) {
            Some(insert) if prepared == ffi::SQLITE_OK => {
                *kept = Some(insert);
                Ok(insert)
            }
            _ => Err(self.error("cannot prepare the runs record's statement")),
        }
    }

    fn exec(&self, sql: &CStr) -> StoreResult<()> {
        // SAFETY: `db` is open and `sql` NUL-terminated; no callback, no error string asked for
        // (the connection's own message is read instead).
        let done = unsafe {
            ffi::sqlite3_exec(
                self.db.as_ptr(),
                sql.as_ptr(),
                None,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if done == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(self.error(&format!("`{}` failed", sql.to_string_lossy())))
        }
    }

    /// The connection's last error, after `what`.
    fn error(&self, what: &str) -> StoreError {
        // SAFETY: `db` is a connection handle (open, or failed to open); the message is copied
        // before anything else runs on it.
        let message = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(self.db.as_ptr())) };
        StoreError::Write(format!("{what}: {}", message.to_string_lossy()))
    }
}

/// An `INSERT` a [`RunsConnection`] keeps prepared.
#[derive(Debug, Clone, Copy)]
enum Statement {
    /// Of `RUNS_STATEMENTS[size]` rows.
    Rows(usize),
    Block,
}

/// `path` as SQLite's `open` takes it: its bytes, NUL-terminated (on Unix whatever they are,
/// elsewhere UTF-8).
fn c_path(path: &Path) -> Option<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes()
    };
    #[cfg(not(unix))]
    let bytes = path.to_str()?.as_bytes();
    CString::new(bytes).ok()
}

impl Drop for RunsConnection {
    fn drop(&mut self) {
        // SAFETY: every statement is this connection's and used no more; finalized first, so the
        // connection closes (`sqlite3_close` refuses while statements are left).
        unsafe {
            for insert in self.inserts.iter().chain([&self.block]).flatten() {
                ffi::sqlite3_finalize(insert.as_ptr());
            }
            ffi::sqlite3_close(self.db.as_ptr());
        }
    }
}
