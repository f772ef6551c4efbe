//! The reads and changes that serve operators and tests (cancel, one job's record, a
//! queue's counts, its dead letters), and the newest id the wake poller watches.

use hopper_core::{CancelOutcome, JobId, JobRecord, LeaseId, Millis, QueueCounts};
use sqlx::mysql::MySqlConnection;

use hopper_core::job::is_blocked;
use sqlx::Row;

use super::rows::{LEASED, PENDING, record_from_row};
use super::{groups, ordering};
use crate::sql::{self, fixed};

/// What [`cancel`] found.
pub(crate) enum Cancel {
    /// The outcome.
    Done(CancelOutcome),
    /// A pending job with an ordering key or a group: it is cancelled in a transaction of its
    /// own ([`cancel_ordered`]), so that its key moves on and its
    /// group counts it.
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

/// The newest job id, if there is a job.
pub(crate) async fn max_id(conn: &mut MySqlConnection) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(fixed(&sql::MAX_ID))
        .fetch_one(conn)
        .await
}

/// Cancels job `id`, which has an ordering key or a group, if it is still pending, inside
/// the caller's transaction: its row locked first, its group counting it, and the key's
/// next job unblocked when the job could run. Returns the outcome and whether a job was
/// unblocked or a completion job enqueued.
pub(crate) async fn cancel_ordered(
    conn: &mut MySqlConnection,
    id: JobId,
    now: Option<Millis>,
    id_step: i64,
) -> Result<(CancelOutcome, bool), sqlx::Error> {
    let row = sqlx::query(fixed(&sql::JOB_LOCK))
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else {
        return Ok((CancelOutcome::NotFound, false));
    };
    let (state, lease, run_at): (i8, Option<i64>, Millis) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    let line: Option<ordering::Line> = match row.try_get::<Option<Vec<u8>>, _>(4)? {
        Some(key) => Some((row.try_get_unchecked(3)?, key)),
        None => None,
    };
    let group = groups::group_of(&row, 5)?;
    match (state, lease) {
        (PENDING, _) => {
            sqlx::query(fixed(&sql::ORDERING_CANCEL))
                .bind(now)
                .bind(id.0)
                .execute(&mut *conn)
                .await?;
            let fired = match group {
                Some(group) => {
                    let member = vec![(group, id.0, groups::Ended::Cancelled)];
                    groups::ended(conn, member, now, id_step).await?
                }
                None => false,
            };
            let unblocked = match line {
                Some(line) if !is_blocked(run_at) => {
                    ordering::unblock(conn, vec![line], now).await?
                }
                _ => false,
            };
            Ok((CancelOutcome::Cancelled, unblocked || fired))
        }
        (LEASED, Some(lease)) => Ok((CancelOutcome::Held(LeaseId(lease)), false)),
        _ => Ok((CancelOutcome::NotFound, false)),
    }
}
