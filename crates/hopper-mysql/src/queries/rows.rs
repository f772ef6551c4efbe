//! Job states as the table stores them, and jobs and job records decoded from rows.

use hopper_core::admin::{AttemptError, ERROR_HISTORY, bounded_error};
use hopper_core::job::{headers_for_record, headers_from_json, is_blocked, own_run_at};
use hopper_core::{Job, JobId, JobRecord, JobState, LeaseId};
use serde_json::Value;
use sqlx::Row;
use sqlx::mysql::MySqlRow;

pub(super) const PENDING: i8 = 0;
pub(super) const LEASED: i8 = 1;
pub(super) const COMPLETED: i8 = 2;
pub(super) const DEAD: i8 = 3;
pub(super) const CANCELLED: i8 = 4;

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

/// A job state as the `state` column stores it.
pub(super) fn state_from_code(code: i8) -> Result<JobState, sqlx::Error> {
    Ok(match code {
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
    })
}

/// Reads a job's columns (see [`job_from_row`]) followed by `state, lease_id, last_error,
/// finished_at, errors, lease_expires, unique_key, ordering_key, started_at, rate_key` (the
/// record columns of `job_record.sql`; `lease_expires` is the listings' cursor, not part of
/// the record).
///
/// A job waiting behind an earlier job of its ordering key shows its own time and
/// `blocked`; [`stored_run_at`] gives back the time it is stored with.
pub(super) fn record_from_row(row: &MySqlRow) -> Result<JobRecord, sqlx::Error> {
    let state = state_from_code(row.try_get::<i8, _>(9)?)?;
    let lease = match (state, row.try_get::<Option<i64>, _>(10)?) {
        (JobState::Leased, Some(lease)) => LeaseId(lease),
        _ => LeaseId(0),
    };
    let mut job = read_job(row, lease, false)?;
    let blocked = state == JobState::Pending && is_blocked(job.run_at);
    job.run_at = own_run_at(job.run_at);
    let ordering_key: Option<Vec<u8>> = row.try_get(16)?;
    let rate_key: Option<Vec<u8>> = row.try_get(18)?;
    Ok(JobRecord {
        job,
        state,
        last_error: row.try_get(11)?,
        errors: errors_from_json(row.try_get::<Option<String>, _>(13)?.as_deref()),
        started_at: row.try_get(17)?,
        finished_at: row.try_get(12)?,
        unique_key: row.try_get(15)?,
        // Keys are the UTF-8 of a `String`; bytes another program wrote are shown lossily.
        ordering_key: ordering_key.map(|k| String::from_utf8_lossy(&k).into_owned()),
        rate_key: rate_key.map(|k| String::from_utf8_lossy(&k).into_owned()),
        blocked,
    })
}

/// The `run_at` a record's job is stored with: its own time, moved when it is blocked.
pub(super) fn stored_run_at(record: &JobRecord) -> hopper_core::Millis {
    match record.blocked {
        true => hopper_core::job::ordering::blocked(record.job.run_at),
        false => record.job.run_at,
    }
}

/// An error history as `settle_update.sql` writes it, read leniently, as headers are
/// ([`headers_for_record`]): entries that are not `{attempt, at, error}` are left out, and
/// a history that is not a JSON array (another program wrote it) shows as one entry of
/// attempt 0 holding the stored text, so that the record is still listed.
fn errors_from_json(text: Option<&str>) -> Vec<AttemptError> {
    let Some(text) = text else {
        return Vec::new();
    };
    let Ok(Value::Array(entries)) = serde_json::from_str::<Value>(text) else {
        return vec![AttemptError {
            attempt: 0,
            at: 0,
            error: bounded_error(text).to_owned(),
        }];
    };
    let read = |entry: &Value| {
        Some(AttemptError {
            attempt: u32::try_from(entry.get("attempt")?.as_u64()?).ok()?,
            at: entry.get("at")?.as_i64()?,
            error: entry.get("error")?.as_str()?.to_owned(),
        })
    };
    let mut errors: Vec<AttemptError> = entries.iter().filter_map(read).collect();
    let extra = errors.len().saturating_sub(ERROR_HISTORY);
    errors.drain(..extra);
    errors
}

#[cfg(test)]
mod tests {
    use hopper_core::admin::ERROR_HISTORY;

    use super::errors_from_json;

    #[test]
    fn error_histories_read_leniently() {
        assert!(errors_from_json(None).is_empty());
        let history = r#"[{"attempt": 1, "at": 5, "error": "a"}, {"attempt": -1}, 7,
                          {"attempt": 2, "at": 9, "error": "b"}]"#;
        let read: Vec<(u32, i64, String)> = errors_from_json(Some(history))
            .into_iter()
            .map(|e| (e.attempt, e.at, e.error))
            .collect();
        assert_eq!(read, [(1, 5, "a".into()), (2, 9, "b".into())]);
        for stored in ["not json", "{\"attempt\": 1}"] {
            let read = errors_from_json(Some(stored));
            assert_eq!(read.len(), 1, "{stored}");
            assert_eq!((read[0].attempt, read[0].error.as_str()), (0, stored));
        }
        let long: Vec<String> = (1..=30)
            .map(|n| format!(r#"{{"attempt": {n}, "at": {n}, "error": "e"}}"#))
            .collect();
        let read = errors_from_json(Some(&format!("[{}]", long.join(","))));
        assert_eq!(read.len(), ERROR_HISTORY);
        assert_eq!(
            read[0].attempt,
            31 - ERROR_HISTORY as u32,
            "the latest are kept"
        );
    }
}
