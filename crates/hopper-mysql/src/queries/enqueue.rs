//! Enqueueing: jobs encoded once, split into inserts of at most [`ENQUEUE_ROWS`] jobs and
//! [`ENQUEUE_BYTES`], each one multi-row `INSERT`. A batch in which some job has a unique
//! or an ordering key, a group or a rate key goes through `ordering::enqueue_keyed`, in one
//! transaction.

use hopper_core::job::BLOCKED;
use hopper_core::{JobId, Millis, NewJob};
use sqlx::mysql::MySqlConnection;

use crate::sql;

/// The most jobs one `INSERT` carries.
pub(crate) const ENQUEUE_ROWS: usize = 1000;

/// The most payload and header bytes one `INSERT` carries, well under the server's
/// `max_allowed_packet` (16 MiB by default on MariaDB, 64 MiB on MySQL 8).
const ENQUEUE_BYTES: usize = 4 << 20;

/// A new job's values, encoded once so that a repeated call binds the same ones.
pub(crate) struct NewRow<'a> {
    job: &'a NewJob,
    run_at: Option<Millis>,
    delay_ms: Millis,
    headers: Option<String>,
    /// Stored waiting behind an earlier job of its ordering key (`ordering::enter`).
    pub(crate) blocked: bool,
}

/// Encodes jobs for [`insert`]: with no clock of our own, a job due now or after a delay
/// leaves the time to the database.
pub(crate) fn new_rows<'a>(
    jobs: impl IntoIterator<Item = &'a NewJob>,
    now: Option<Millis>,
) -> Vec<NewRow<'a>> {
    jobs.into_iter()
        .map(|job| {
            let (run_at, delay_ms) = job.run_at_parts(now);
            NewRow {
                job,
                run_at,
                delay_ms,
                headers: job.headers_json(),
                blocked: false,
            }
        })
        .collect()
}

/// Splits rows into the inserts that carry them: at most [`ENQUEUE_ROWS`] each, and no more
/// than [`ENQUEUE_BYTES`] unless a single job is larger.
pub(crate) fn chunks<'r, 'a>(rows: &'r [NewRow<'a>]) -> Vec<&'r [NewRow<'a>]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let size = row.job.payload.len() + row.headers.as_ref().map_or(0, String::len);
        if i > start && (i - start == ENQUEUE_ROWS || bytes + size > ENQUEUE_BYTES) {
            out.push(&rows[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

/// Inserts one chunk with one statement and returns the ids, in order.
///
/// One multi-row `INSERT` in which every id is generated is what InnoDB calls a "simple
/// insert": it reserves all its AUTO_INCREMENT values at once, so they are consecutive (in
/// steps of `auto_increment_increment`) in every `innodb_autoinc_lock_mode`, and
/// `LAST_INSERT_ID()` is the first. Only a concurrent bulk load of `hopper_jobs`
/// (`INSERT … SELECT`, `LOAD DATA`) under lock mode 2 could interleave, which Hopper never
/// does.
pub(crate) async fn insert(
    conn: &mut MySqlConnection,
    rows: &[NewRow<'_>],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Vec<JobId>, sqlx::Error> {
    insert_rows(conn, rows, now, id_step, false).await
}

/// [`insert`], writing each job's unique key, ordering key, group and rate key (NULL for a
/// job without one) into its row in the same statement, so that its record shows the unique key whether or
/// not the job keeps it, and its `run_at` moved by [`BLOCKED`] when it is `blocked`. Only
/// enqueues in which some job has a key come here: the plain insert binds no key.
pub(crate) async fn insert_keyed(
    conn: &mut MySqlConnection,
    rows: &[NewRow<'_>],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Vec<JobId>, sqlx::Error> {
    insert_rows(conn, rows, now, id_step, true).await
}

async fn insert_rows(
    conn: &mut MySqlConnection,
    rows: &[NewRow<'_>],
    now: Option<Millis>,
    id_step: i64,
    keyed: bool,
) -> Result<Vec<JobId>, sqlx::Error> {
    let n = rows.len();
    // Insert texts cannot be padded; keep prepared only the sizes that recur.
    let recurring = n <= 8 || n == ENQUEUE_ROWS;
    let text = if keyed {
        sql::enqueue_keyed(n)
    } else {
        sql::enqueue(n)
    };

    let mut query = sqlx::query(&text).persistent(recurring);
    for row in rows {
        query = query
            .bind(row.job.queue.as_str())
            .bind(row.job.priority)
            .bind(row.run_at)
            .bind(row.delay_ms);
        if keyed {
            query = query.bind(if row.blocked { BLOCKED } else { 0 });
        }
        query = query
            .bind(i32::try_from(row.job.max_attempts).unwrap_or(i32::MAX))
            .bind(row.job.payload.as_slice())
            .bind(row.headers.as_deref())
            .bind(now);
        if keyed {
            query = query
                .bind(row.job.unique.as_ref().map(|u| u.key.as_str()))
                .bind(row.job.ordering_key.as_deref().map(str::as_bytes))
                .bind(row.job.group.as_deref().map(str::as_bytes))
                .bind(row.job.rate_key.as_deref().map(str::as_bytes));
        }
    }
    let done = query.execute(&mut *conn).await?;
    if done.rows_affected() != n as u64 {
        return Err(sqlx::Error::Protocol(format!(
            "an insert of {n} jobs reported {} rows",
            done.rows_affected()
        )));
    }
    let first = done.last_insert_id() as i64;
    Ok((0..n as i64).map(|k| JobId(first + k * id_step)).collect())
}
