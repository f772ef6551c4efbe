//! Reading rows: a claimed job, a record, and the pending rows that cannot be read as a job
//! (buried as dead letters at once, so that they stop coming back to every claim).

use std::collections::BTreeMap;

use hopper_core::admin::{AttemptError, ERROR_HISTORY};
use hopper_core::job::{headers_for_record, headers_from_json, unreadable_row};
use hopper_core::{Job, JobId, JobRecord, JobState, LeaseId, Millis};
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::groups::{self, Ended};
use crate::ordering::{self, Line};
use crate::sql;
use crate::store::{CANCELLED, COMPLETED, DEAD, LEASED, PENDING};

/// Reads the columns `id, queue, payload, priority, run_at, attempt, max_attempts, headers,
/// created_at, lease_id`, in that order.
fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Job> {
    read_job(row, true)
}

/// [`job_from_row`], except that `strict` off shows a job as it can for its record:
/// headers that cannot be read as they were stored ([`headers_for_record`]), attempts
/// out of range at their nearest bound.
fn read_job(row: &Row<'_>, strict: bool) -> rusqlite::Result<Job> {
    let (attempt, max_attempts, headers) = if strict {
        (row.get(5)?, row.get(6)?, decode_headers(row.get(7)?)?)
    } else {
        let clamp = |n: i64| n.clamp(0, i64::from(u32::MAX)) as u32;
        let text: Option<String> = row.get(7)?;
        (
            clamp(row.get(5)?),
            clamp(row.get(6)?),
            headers_for_record(text.as_deref()),
        )
    };
    Ok(Job {
        id: JobId(row.get(0)?),
        queue: row.get(1)?,
        payload: row.get(2)?,
        priority: row.get(3)?,
        run_at: row.get(4)?,
        attempt,
        max_attempts,
        headers,
        created_at: row.get(8)?,
        lease: LeaseId(row.get::<_, Option<i64>>(9)?.unwrap_or(0)),
    })
}

/// The columns [`job_from_row`] reads, by index, to name one in an error.
const JOB_COLUMNS: [&str; 10] = [
    "id",
    "queue",
    "payload",
    "priority",
    "run_at",
    "attempt",
    "max_attempts",
    "headers",
    "created_at",
    "lease_id",
];

/// A pending row that cannot be read as a job: a column out of range, written by another
/// program. Dead-lettered at once with the reason, so that it neither fails every claim
/// of its queue (and of every queue fetched with it) nor comes back.
#[derive(Debug)]
pub(crate) struct Unreadable {
    id: i64,
    queue: String,
    reason: String,
}

impl Unreadable {
    /// Dead-letters the row; says whether that unblocked the next job of its ordering key or
    /// enqueued its group's completion job.
    pub(crate) fn bury(&self, conn: &Connection, now: Millis) -> rusqlite::Result<bool> {
        let buried = conn
            .prepare_cached(sql::BURY_PENDING)?
            .query_row(params![self.id, self.reason, now], |row| {
                Ok((Line::of_row(row)?, groups::group_of(row, 2)?))
            })
            .optional()?;
        tracing::error!(job = self.id, queue = %self.queue, reason = %self.reason,
            "dead-lettered a row that cannot be read as a job");
        let Some((line, group)) = buried else {
            return Ok(false);
        };
        let mut woke = match line {
            Some(line) => ordering::head_ended(conn, &line, now)?,
            None => false,
        };
        if let Some(group) = group {
            woke |= groups::member_ended(conn, &group, self.id, Ended::Dead, now)?;
        }
        Ok(woke)
    }
}

/// A claim candidate: the job, or, when its row cannot be read as one, why.
pub(crate) fn candidate_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Job, Unreadable>> {
    match job_from_row(row) {
        Ok(job) => Ok(Ok(job)),
        Err(e) => {
            let column = |i: usize| JOB_COLUMNS.get(i).copied().unwrap_or("?");
            let why = match &e {
                rusqlite::Error::FromSqlConversionFailure(i, _, err) => {
                    format!("column {}: {err}", column(*i))
                }
                rusqlite::Error::IntegralValueOutOfRange(i, v) => {
                    format!("column {}: {v} is out of range", column(*i))
                }
                rusqlite::Error::InvalidColumnType(i, _, t) => {
                    format!("column {}: a {t} where it cannot be", column(*i))
                }
                other => other.to_string(),
            };
            Ok(Err(Unreadable {
                id: row.get(0)?,
                queue: row.get(1)?,
                reason: unreadable_row(why),
            }))
        }
    }
}

/// Reads a job's columns (see [`job_from_row`]) followed by `state, last_error, errors,
/// finished_at, unique_key, ordering_key, started_at`, and `rate_key` by name (after a
/// listing's cursor). A blocked job shows its own time.
pub(crate) fn record_from_row(row: &Row<'_>) -> rusqlite::Result<JobRecord> {
    let state = match row.get::<_, i64>(10)? {
        PENDING => JobState::Pending,
        LEASED => JobState::Leased,
        COMPLETED => JobState::Completed,
        DEAD => JobState::Dead,
        CANCELLED => JobState::Cancelled,
        other => {
            return Err(rusqlite::Error::FromSqlConversionFailure(
                10,
                Type::Integer,
                format!("unknown job state {other}").into(),
            ));
        }
    };
    let mut job = read_job(row, false)?;
    if state != JobState::Leased {
        job.lease = LeaseId(0);
    }
    let blocked;
    (job.run_at, blocked) = ordering::own_time(job.run_at, state == JobState::Pending);
    let errors: Option<String> = row.get(12)?;
    Ok(JobRecord {
        job,
        state,
        last_error: row.get(11)?,
        errors: errors_for_record(errors.as_deref()),
        // Stamped by each claim since migration 0010; NULL for a job never claimed since.
        started_at: row.get(16)?,
        finished_at: row.get(13)?,
        // Kept by the keyed enqueue (migration 0008), so a job shows its key after it has
        // given up the hold; NULL for a job without one or stored before the column.
        unique_key: row.get(14)?,
        ordering_key: row.get(15)?,
        rate_key: row.get("rate_key")?,
        blocked,
    })
}

/// The stored error history (migration 0004), its latest [`ERROR_HISTORY`] entries. A
/// text another program wrote that is not an array of such entries leaves out what
/// cannot be read, down to the whole history, rather than make the row unreadable: the
/// record must still list, as [`headers_for_record`] does for headers.
fn errors_for_record(text: Option<&str>) -> Vec<AttemptError> {
    let Some(Ok(serde_json::Value::Array(entries))) = text.map(serde_json::from_str) else {
        return Vec::new();
    };
    let skip = entries.len().saturating_sub(ERROR_HISTORY);
    entries
        .iter()
        .skip(skip)
        .filter_map(|entry| {
            Some(AttemptError {
                attempt: u32::try_from(entry.get("attempt")?.as_u64()?).ok()?,
                at: entry.get("at")?.as_i64()?,
                error: entry.get("error")?.as_str()?.to_owned(),
            })
        })
        .collect()
}

fn decode_headers(text: Option<String>) -> rusqlite::Result<BTreeMap<String, String>> {
    headers_from_json(text.as_deref())
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(7, Type::Text, Box::new(e)))
}
