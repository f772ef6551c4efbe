//! Opening the file: connection settings and versioned migrations.

use std::path::Path;
use std::time::Duration;

use hopper_core::{Error, Result};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};

use crate::sql::MIGRATIONS;

/// Prepared statements kept per connection: more than the broker has (`sql`), so none is
/// evicted, and an operator call or a job with a unique key never costs a claim a prepare.
pub(crate) const STATEMENT_CACHE: usize = 128;

/// Opens `path`, creating it if needed, in WAL mode with `synchronous = NORMAL`, and brings
/// its schema up to date. Every error names the path.
pub(crate) fn open(path: &Path, busy_timeout: Duration) -> Result<Connection> {
    let doing = |what: &str| format!("{what} SQLite database `{}`", path.display());
    let mut conn = Connection::open(path).map_err(|e| Error::broker(doing("opening"), e))?;
    configure(&conn, busy_timeout).map_err(|e| Error::broker(doing("configuring"), e))?;
    let version = migrate(&mut conn).map_err(|e| Error::broker(doing("migrating"), e))?;
    if version > MIGRATIONS.len() {
        return Err(Error::broker_msg(format!(
            "SQLite database `{}` has schema version {version}, newer than this build of \
             hopper-sqlite knows ({}); upgrade Hopper to use it",
            path.display(),
            MIGRATIONS.len()
        )));
    }
    Ok(conn)
}

fn configure(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The bundled SQLite has STAT4, under which a cached statement with a range on a bound
    // parameter (`run_at <= ?`) is compiled again whenever the value changes, which was a
    // quarter of a claim's cost. The query-planner stability guarantee keeps one plan.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.busy_timeout(busy_timeout)?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        // In-memory databases cannot use WAL; they still work, for one connection.
        tracing::warn!(journal_mode = %mode, "SQLite database is not in WAL mode");
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
}

/// Runs the migrations the file has not seen, each in its own write transaction that
/// re-reads the version first, so processes opening the file together apply each once.
/// Returns the schema version found or reached.
fn migrate(conn: &mut Connection) -> rusqlite::Result<usize> {
    let mut version = 0;
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let target = index + 1;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        version = tx.pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))? as usize;
        if version >= target {
            continue;
        }
        tx.execute_batch(migration)?;
        tx.pragma_update(None, "user_version", target as i64)?;
        tx.commit()?;
        version = target;
    }
    Ok(version)
}
