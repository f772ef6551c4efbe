//! The reads and changes that serve operators and tests (cancel, one job's record, a
//! queue's counts, its dead letters, purging it), and the newest id the wake poller watches.

use hopper_core::{CancelOutcome, JobId, JobRecord, LeaseId, Millis, QueueCounts};
use sqlx::mysql::MySqlConnection;

use super::rows::{LEASED, PENDING, record_from_row};
use crate::sql::{self, fixed};

/// What [`cancel`] found.
pub(crate) enum Cancel {
    /// The outcome.
    Done(CancelOutcome),
    /// A pending job with an ordering key: it is cancelled in a transaction of its own
    /// ([`ordering::cancel`](super::ordering::cancel)), so that its key moves on.
    Ordered,
}

/// Cancels a pending job without an ordering key, or says who holds the job, or that it
/// has a key: the statement that cancels leaves those alone.
pub(crate) async fn cancel(
    conn: &mut MySqlConnection,
    id: JobId,
    now: Option<Millis>,
) -> Result<Cancel, sqlx::Error> {
    let done = sqlx::query(fixed(&sql::CANCEL))
        .bind(now)
        .bind(id.0)
        .execute(&mut *conn)
        .await?;
    if done.rows_affected() == 1 {
        return Ok(Cancel::Done(CancelOutcome::Cancelled));
    }
    let found: Option<(i8, Option<i64>, i64)> = sqlx::query_as(fixed(&sql::JOB_LEASE))
        .bind(id.0)
        .fetch_optional(conn)
        .await?;
    Ok(match found {
        Some((LEASED, Some(lease), _)) => Cancel::Done(CancelOutcome::Held(LeaseId(lease))),
        Some((PENDING, _, keyed)) if keyed != 0 => Cancel::Ordered,
        _ => Cancel::Done(CancelOutcome::NotFound),
    })
}

/// One job's record.
pub(crate) async fn job(
    conn: &mut MySqlConnection,
    id: JobId,
) -> Result<Option<JobRecord>, sqlx::Error> {
    let row = sqlx::query(fixed(&sql::JOB_RECORD))
        .bind(id.0)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(record_from_row).transpose()
}

/// A queue's jobs by state; due and scheduled are split at now. With a `bound`, each
/// count reads at most `bound + 1` index entries: exact up to the bound, `bound + 1` for
/// more.
pub(crate) async fn counts(
    conn: &mut MySqlConnection,
    queue: &str,
    now: Option<Millis>,
    bound: Option<u64>,
) -> Result<QueueCounts, sqlx::Error> {
    let (statement, limit) = match bound {
        None => (&sql::COUNTS, None),
        Some(b) => (
            &sql::COUNTS_BOUNDED,
            Some(i64::try_from(b.saturating_add(1)).unwrap_or(i64::MAX)),
        ),
    };
    let mut query = sqlx::query_as(fixed(statement));
    // Pending and scheduled are split at now; leased and dead are not.
    for split_at_now in [true, true, false, false] {
        query = query.bind(queue);
        if split_at_now {
            query = query.bind(now);
        }
        if let Some(limit) = limit {
            query = query.bind(limit);
        }
    }
    let (pending, scheduled, leased, dead): (i64, i64, i64, i64) = query.fetch_one(conn).await?;
    let n = |v: i64| v.max(0) as u64;
    Ok(QueueCounts {
        pending: n(pending),
        scheduled: n(scheduled),
        leased: n(leased),
        dead: n(dead),
    })
}

/// A queue's dead letters, oldest first.
pub(crate) async fn dead_letters(
    conn: &mut MySqlConnection,
    queue: &str,
    limit: usize,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    let rows = sqlx::query(fixed(&sql::DEAD_LETTERS))
        .bind(queue)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(conn)
        .await?;
    rows.iter().map(record_from_row).collect()
}

/// Removes every job of a queue; returns how many went.
pub(crate) async fn purge(conn: &mut MySqlConnection, queue: &str) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(fixed(&sql::PURGE))
        .bind(queue)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// The newest job id, if there is a job.
pub(crate) async fn max_id(conn: &mut MySqlConnection) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(fixed(&sql::MAX_ID))
        .fetch_one(conn)
        .await
}
