//! Job states as the table stores them, and jobs and job records decoded from rows.

use hopper_core::job::{headers_for_record, headers_from_json};
use hopper_core::{Job, JobId, JobRecord, JobState, LeaseId};
use sqlx::Row;
use sqlx::mysql::MySqlRow;

const PENDING: i8 = 0;
pub(super) const LEASED: i8 = 1;
const COMPLETED: i8 = 2;
const DEAD: i8 = 3;
const CANCELLED: i8 = 4;

/// Reads the columns `id, queue, payload, priority, run_at, attempt, max_attempts,
/// headers, created_at`, in that order, as a job held under `lease`.
pub(super) fn job_from_row(row: &MySqlRow, lease: LeaseId) -> Result<Job, sqlx::Error> {
    read_job(row, lease, true)
}

/// [`job_from_row`], except that `strict` off shows headers that cannot be read as they
/// were stored ([`headers_for_record`]), for records.
fn read_job(row: &MySqlRow, lease: LeaseId, strict: bool) -> Result<Job, sqlx::Error> {
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
        // `ascii_bin` reaches the client flagged binary, which sqlx's type check refuses
        // for a `String`; the bytes are ASCII, and decoding still checks them.
        queue: row.try_get_unchecked(1)?,
        payload: row.try_get(2)?,
        priority: row.try_get(3)?,
        run_at: row.try_get(4)?,
        attempt: row.try_get::<i32, _>(5)?.max(0) as u32,
        max_attempts: row.try_get::<i32, _>(6)?.max(1) as u32,
        headers,
        created_at: row.try_get(8)?,
        lease,
    })
}

/// Reads a job's columns (see [`job_from_row`]) followed by `state, lease_id, last_error`.
pub(super) fn record_from_row(row: &MySqlRow) -> Result<JobRecord, sqlx::Error> {
    let state = match row.try_get::<i8, _>(9)? {
        PENDING => JobState::Pending,
        LEASED => JobState::Leased,
        COMPLETED => JobState::Completed,
        DEAD => JobState::Dead,
        CANCELLED => JobState::Cancelled,
        other => {
            return Err(sqlx::Error::ColumnDecode {
                index: "state".into(),
                source: format!("unknown job state {other}").into(),
            });
        }
    };
    let lease = match (state, row.try_get::<Option<i64>, _>(10)?) {
        (JobState::Leased, Some(lease)) => LeaseId(lease),
        _ => LeaseId(0),
    };
    Ok(JobRecord {
        job: read_job(row, lease, false)?,
        state,
        last_error: row.try_get(11)?,
        errors: Vec::new(),
        started_at: None,
        finished_at: None,
    })
}
