//! Jobs and job records, decoded from the rows of the statements that return them.

use hopper_core::admin::{AttemptError, bounded_error};
use hopper_core::job::{headers_for_record, headers_from_json, is_blocked, own_run_at};
use hopper_core::{Job, JobId, JobRecord, JobState, LeaseId};
use sqlx::Row;
use sqlx::postgres::PgRow;

/// Decodes the job columns every job-returning statement selects first, in this order:
/// id, queue, payload, priority, run_at, attempt, max_attempts, headers, created_at.
pub(super) fn job_from_row(row: &PgRow, lease: LeaseId) -> Result<Job, sqlx::Error> {
    read_job(row, lease, true)
}

/// [`job_from_row`], except that `strict` off shows headers that cannot be read as they
/// were stored ([`headers_for_record`]), for records.
fn read_job(row: &PgRow, lease: LeaseId, strict: bool) -> Result<Job, sqlx::Error> {
    let headers: Option<String> = row.try_get(7)?;
    let headers = if strict {
        headers_from_json(headers.as_deref()).map_err(|e| sqlx::Error::ColumnDecode {
            index: "headers".into(),
            source: Box::new(e),
        })?
    } else {
        headers_for_record(headers.as_deref())
    };
    Ok(Job {
        id: JobId(row.try_get(0)?),
        queue: row.try_get(1)?,
        payload: row.try_get(2)?,
        priority: row.try_get(3)?,
        run_at: own_run_at(row.try_get(4)?),
        attempt: row.try_get::<i32, _>(5)?.max(0) as u32,
        max_attempts: row.try_get::<i32, _>(6)?.max(1) as u32,
        headers,
        created_at: row.try_get(8)?,
        lease,
    })
}

/// Decodes a job record from the columns of job_record.sql: the job's, then state,
/// lease_id, last_error, errors, started_at, finished_at, unique_key and ordering_key.
/// A blocked job ([`hopper_core::job::ordering`]) shows its own `run_at`. Listings select
/// the same columns first, so one decoder serves every statement that shows records.
pub(super) fn record_from_row(row: &PgRow) -> Result<JobRecord, sqlx::Error> {
    let state: i16 = row.try_get(9)?;
    let lease: Option<i64> = row.try_get(10)?;
    let state = match state {
        0 => JobState::Pending,
        1 => JobState::Leased,
        2 => JobState::Completed,
        3 => JobState::Dead,
        _ => JobState::Cancelled,
    };
    let lease = match state {
        JobState::Leased => LeaseId(lease.unwrap_or(0)),
        _ => LeaseId(0),
    };
    let blocked = state == JobState::Pending && is_blocked(row.try_get(4)?);
    Ok(JobRecord {
        job: read_job(row, lease, false)?,
        state,
        last_error: row.try_get(11)?,
        errors: history_for_record(row.try_get::<Option<String>, _>(12)?.as_deref()),
        started_at: row.try_get(13)?,
        finished_at: row.try_get(14)?,
        unique_key: row.try_get(15)?,
        ordering_key: row.try_get(16)?,
        rate_key: row.try_get("rate_key")?,
        blocked,
    })
}

/// The error history as stored (`[{"attempt":N,"at":MS,"error":"..."}, …]`). Another
/// program may have written something else there. Like headers that cannot be read
/// ([`headers_for_record`]), what cannot be read is shown as it was stored, as an entry of
/// attempt 0 (no attempt has that number): each such entry of the array, or the whole
/// column when it is not an array. The record still lists, and the operator sees why.
fn history_for_record(text: Option<&str>) -> Vec<AttemptError> {
    let Some(text) = text else {
        return Vec::new();
    };
    match serde_json::from_str::<Vec<serde_json::Value>>(text) {
        Ok(entries) => entries
            .iter()
            .map(|e| read_entry(e).unwrap_or_else(|| unreadable_entry(&e.to_string())))
            .collect(),
        Err(_) => vec![unreadable_entry(text)],
    }
}

fn read_entry(e: &serde_json::Value) -> Option<AttemptError> {
    Some(AttemptError {
        attempt: u32::try_from(e.get("attempt")?.as_u64()?).ok()?,
        at: e.get("at")?.as_i64()?,
        error: e.get("error")?.as_str()?.to_owned(),
    })
}

fn unreadable_entry(stored: &str) -> AttemptError {
    AttemptError {
        attempt: 0,
        at: 0,
        error: format!(
            "the error history cannot be read: {}",
            bounded_error(stored)
        ),
    }
}
