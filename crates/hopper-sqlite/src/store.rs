//! What a job row holds, for every module that writes one: its states, how a new job is
//! inserted, and TEXT bytes bound back as TEXT.

use hopper_core::{JobId, Millis, NewJob};
use rusqlite::ToSql;
use rusqlite::types::{ToSqlOutput, ValueRef};

pub(crate) const PENDING: i64 = 0;
pub(crate) const LEASED: i64 = 1;
pub(crate) const COMPLETED: i64 = 2;
pub(crate) const DEAD: i64 = 3;
pub(crate) const CANCELLED: i64 = 4;

/// Inserts one pending job, created at `now`, with `insert`: `INSERT_JOB`, or a statement
/// that takes `extra` values after the job's seven (`INSERT_KEYED_JOB` its unique key,
/// `INSERT_ORDERED_JOB` its ordering key, the blocked offset and its unique key or NULL).
/// Keyed jobs have statements of their own so that the plain path's statement stays as it
/// was. Returns the job's id.
pub(crate) fn insert_job(
    insert: &mut rusqlite::CachedStatement<'_>,
    job: &NewJob,
    now: Millis,
    extra: &[&dyn rusqlite::ToSql],
) -> rusqlite::Result<JobId> {
    let (run_at, headers) = (job.run_at_millis(now), job.headers_json());
    let values: [&dyn rusqlite::ToSql; 7] = [
        &job.queue,
        &job.priority,
        &run_at,
        &job.max_attempts,
        &job.payload,
        &headers,
        &now,
    ];
    let all = values.iter().chain(extra).copied();
    Ok(JobId(insert.insert(rusqlite::params_from_iter(all))?))
}

/// Bytes read from a TEXT column, bound as TEXT again.
pub(crate) struct Text<'a>(pub(crate) &'a [u8]);

impl ToSql for Text<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self.0)))
    }
}
