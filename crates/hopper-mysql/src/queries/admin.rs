//! The operator calls: listings a page at a time, dead letters re-driven or discarded,
//! pauses, queue names and a queue's statistics (with its rate limit), counted exactly or up
//! to a bound.

use hopper_core::admin::{Cursor, JobPage, JobQuery, ListState, QueueStatus, Selection, lag_since};
use hopper_core::registry::windows;
use hopper_core::{JobId, JobRecord, Millis, RateLimit};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::inspect::counts;
use super::ordering::{self, Line};
use super::rate::stored_limit;
use super::registry::buckets;
use super::rows::{CANCELLED, COMPLETED, DEAD, record_from_row, stored_run_at};
use crate::sql::{self, MAX_LIST, fixed, padded};

/// A page of `query`'s jobs, each with the cursor that follows it.
pub(crate) async fn list(
    conn: &mut MySqlConnection,
    query: &JobQuery,
    now: Option<Millis>,
) -> Result<JobPage, sqlx::Error> {
    let found = match query.state {
        ListState::Pending => waiting(conn, query, true, now).await?,
        ListState::Scheduled => waiting(conn, query, false, now).await?,
        ListState::Leased => leased(conn, query).await?,
        ListState::Dead => finished(conn, query, DEAD).await?,
        ListState::Completed => finished(conn, query, COMPLETED).await?,
        ListState::Cancelled => finished(conn, query, CANCELLED).await?,
    };
    let next = (found.len() == query.limit)
        .then(|| found.last().map(|(cursor, _)| *cursor))
        .flatten();
    Ok(JobPage {
        jobs: found.into_iter().map(|(_, record)| record).collect(),
        next,
    })
}

/// Where a listing starts when no cursor is given: before every job in its direction.
fn start(query: &JobQuery) -> i64 {
    if query.newest_first {
        i64::MAX
    } else {
        i64::MIN
    }
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Waiting jobs, due or not, level by level: the rest of the cursor's priority level, then
/// each next level (one index dive to find it) until the page is full.
async fn waiting(
    conn: &mut MySqlConnection,
    query: &JobQuery,
    due: bool,
    now: Option<Millis>,
) -> Result<Vec<(Cursor, JobRecord)>, sqlx::Error> {
    let page = sql::list_level(query.newest_first, due);
    let (next_level, mut bound) = if query.newest_first {
        (&sql::LEVEL_ABOVE, i64::MIN)
    } else {
        (&sql::LEVEL_BELOW, i64::MAX)
    };
    let mut level = query.after.map(|c| (c.key, c.sub, c.id.0));
    let mut found = Vec::new();
    loop {
        if let Some((priority, run_at, id)) = level {
            let rows = sqlx::query(&page)
                .bind(&query.queue)
                .bind(priority)
                .bind(now)
                .bind(run_at)
                .bind(run_at)
                .bind(id)
                .bind(limit(query.limit - found.len()))
                .fetch_all(&mut *conn)
                .await?;
            for row in &rows {
                let record = record_from_row(row)?;
                // The stored time, which the page is ordered by, not the one shown.
                let cursor = Cursor {
                    key: i64::from(record.job.priority),
                    sub: stored_run_at(&record),
                    id: record.job.id,
                };
                found.push((cursor, record));
            }
            if found.len() == query.limit {
                return Ok(found);
            }
            bound = priority;
        }
        let next: Option<i32> = sqlx::query_scalar(fixed(next_level))
            .bind(&query.queue)
            .bind(bound)
            .fetch_optional(&mut *conn)
            .await?;
        let Some(priority) = next else {
            return Ok(found);
        };
        level = Some((i64::from(priority), start(query), start(query)));
    }
}

/// Leased jobs, by lease expiry.
async fn leased(
    conn: &mut MySqlConnection,
    query: &JobQuery,
) -> Result<Vec<(Cursor, JobRecord)>, sqlx::Error> {
    let (key, id) = query
        .after
        .map_or((start(query), start(query)), |c| (c.key, c.id.0));
    let rows = sqlx::query(&sql::keyset(&sql::LIST_LEASED, query.newest_first))
        .bind(&query.queue)
        .bind(key)
        .bind(key)
        .bind(id)
        .bind(limit(query.limit))
        .fetch_all(conn)
        .await?;
    with_cursors(&rows, |row, _| row.try_get::<Option<i64>, _>(14))
}

/// Jobs in the finished `state`, by the time they finished.
async fn finished(
    conn: &mut MySqlConnection,
    query: &JobQuery,
    state: i8,
) -> Result<Vec<(Cursor, JobRecord)>, sqlx::Error> {
    let (key, id) = query
        .after
        .map_or((start(query), start(query)), |c| (c.key, c.id.0));
    let rows = sqlx::query(&sql::keyset(&sql::LIST_FINISHED, query.newest_first))
        .bind(&query.queue)
        .bind(state)
        .bind(key)
        .bind(key)
        .bind(id)
        .bind(limit(query.limit))
        .fetch_all(conn)
        .await?;
    with_cursors(&rows, |_, record| Ok(record.finished_at))
}

/// Records with cursors keyed by `key` (0 where the row has none).
fn with_cursors(
    rows: &[MySqlRow],
    key: impl Fn(&MySqlRow, &JobRecord) -> Result<Option<i64>, sqlx::Error>,
) -> Result<Vec<(Cursor, JobRecord)>, sqlx::Error> {
    rows.iter()
        .map(|row| {
            let record = record_from_row(row)?;
            let cursor = Cursor {
                key: key(row, &record)?.unwrap_or(0),
                sub: 0,
                id: record.job.id,
            };
            Ok((cursor, record))
        })
        .collect()
}

/// Puts the selected dead letters back in their queues, due now (`retry`), or deletes them.
/// Returns how many.
///
/// A re-drive first reads which of the selected dead letters have an ordering key: the
/// statement that puts the others back leaves those out, and they go back under their
/// keys' locks ([`ordering::redrive`]).
pub(crate) async fn redrive(
    conn: &mut MySqlConnection,
    which: &Selection,
    retry: bool,
    now: Option<Millis>,
) -> Result<u64, sqlx::Error> {
    if !retry {
        return discard_or_retry(conn, which, false, now).await;
    }
    let ordered = ordered_dead(conn, which).await?;
    let done = discard_or_retry(conn, which, true, now).await?;
    Ok(done + ordering::redrive(conn, ordered, now).await?)
}

/// The selected dead letters that have an ordering key, with their keys.
async fn ordered_dead(
    conn: &mut MySqlConnection,
    which: &Selection,
) -> Result<Vec<(i64, Line)>, sqlx::Error> {
    let mut rows = Vec::new();
    match which {
        Selection::Jobs(ids) => {
            for chunk in ids.chunks(MAX_LIST) {
                let size = padded(chunk.len());
                let text = sql::with_ids(&sql::ORDERING_DEAD, size);
                let mut query = sqlx::query(&text);
                for i in 0..size {
                    query = query.bind(chunk.get(i).map_or(0, |id: &JobId| id.0));
                }
                rows.extend(query.fetch_all(&mut *conn).await?);
            }
        }
        Selection::Queue { queue, at_most } => {
            if *at_most > 0 {
                let query = sqlx::query(fixed(&sql::ORDERING_DEAD_QUEUE))
                    .bind(queue.as_str())
                    .bind(limit(*at_most));
                rows = query.fetch_all(&mut *conn).await?;
            }
        }
    }
    let mut dead = Vec::with_capacity(rows.len());
    for row in &rows {
        // `ascii_bin` reaches the client flagged binary (see `rows`).
        let line = (row.try_get_unchecked(1)?, row.try_get(2)?);
        dead.push((row.try_get(0)?, line));
    }
    // A job named twice goes back once.
    dead.sort_unstable_by_key(|(id, _)| *id);
    dead.dedup_by_key(|(id, _)| *id);
    Ok(dead)
}

/// Runs the re-drive (`retry`) or discard statements of `which`.
async fn discard_or_retry(
    conn: &mut MySqlConnection,
    which: &Selection,
    retry: bool,
    now: Option<Millis>,
) -> Result<u64, sqlx::Error> {
    match which {
        Selection::Jobs(ids) => {
            let template = if retry {
                &sql::RETRY_DEAD
            } else {
                &sql::DISCARD_DEAD
            };
            let mut done = 0;
            for chunk in ids.chunks(MAX_LIST) {
                let size = padded(chunk.len());
                let text = sql::with_ids(template, size);

                let mut query = sqlx::query(&text);
                if retry {
                    query = query.bind(now);
                }
                for i in 0..size {
                    query = query.bind(chunk.get(i).map_or(0, |id: &JobId| id.0));
                }
                done += query.execute(&mut *conn).await?.rows_affected();
            }
            Ok(done)
        }
        Selection::Queue { queue, at_most } => {
            if *at_most == 0 {
                return Ok(0);
            }
            let template = if retry {
                &sql::RETRY_DEAD_QUEUE
            } else {
                &sql::DISCARD_DEAD_QUEUE
            };
            let mut query = sqlx::query(fixed(template))
                .bind(queue.as_str())
                .bind(limit(*at_most));
            if retry {
                query = query.bind(now);
            }
            Ok(query.execute(conn).await?.rows_affected())
        }
    }
}

/// Pauses or resumes a queue; returns whether that changed anything.
pub(crate) async fn set_paused(
    conn: &mut MySqlConnection,
    queue: &str,
    paused: bool,
    now: Option<Millis>,
) -> Result<bool, sqlx::Error> {
    let done = if paused {
        sqlx::query(fixed(&sql::PAUSE))
            .bind(queue)
            .bind(now)
            .execute(conn)
            .await?
    } else {
        sqlx::query(fixed(&sql::RESUME))
            .bind(queue)
            .execute(conn)
            .await?
    };
    Ok(done.rows_affected() > 0)
}

/// The queues holding jobs, or paused, in name order.
pub(crate) async fn queue_names(conn: &mut MySqlConnection) -> Result<Vec<String>, sqlx::Error> {
    let rows = sqlx::query(fixed(&sql::QUEUE_NAMES))
        .fetch_all(conn)
        .await?;
    // `ascii_bin` reaches the client flagged binary (see `rows`).
    rows.iter().map(|row| row.try_get_unchecked(0)).collect()
}

/// A queue's statistics: its counts, exact (`bound` `None`) or each read up to `bound + 1`
/// jobs (see [`counts`]), whether it is paused, its lag and its throughput.
pub(crate) async fn queue_status(
    conn: &mut MySqlConnection,
    queue: &str,
    now: Option<Millis>,
    bound: Option<u64>,
) -> Result<QueueStatus, sqlx::Error> {
    let counts = counts(conn, queue, now, bound).await?;
    let state = queue_state(conn, queue, now).await?;
    // Against the clock the state was read at, as the windows are.
    let buckets = buckets(conn, queue, Some(state.now)).await?;
    let (last_minute, last_hour) = windows(&buckets, state.now);
    Ok(QueueStatus {
        queue: queue.to_owned(),
        counts,
        paused: state.paused,
        lag: lag_since(state.oldest_due, state.now),
        last_minute: Some(last_minute),
        last_hour: Some(last_hour),
        bound,
        consumers: None,
        rate_limit: state.rate_limit,
    })
}

/// What a queue's statistics add to its counts.
struct QueueState {
    paused: bool,
    /// The `run_at` of its oldest due job.
    oldest_due: Option<Millis>,
    /// The clock that was read against.
    now: Millis,
    /// Its rate limit, if it has one.
    rate_limit: Option<RateLimit>,
}

async fn queue_state(
    conn: &mut MySqlConnection,
    queue: &str,
    now: Option<Millis>,
) -> Result<QueueState, sqlx::Error> {
    let row = sqlx::query(fixed(&sql::QUEUE_STATE))
        .bind(queue)
        .bind(queue)
        .bind(now)
        .bind(now)
        .bind(queue)
        .bind(queue)
        .bind(queue)
        .fetch_one(conn)
        .await?;
    let limit = (row.try_get(3)?, row.try_get(4)?);
    let per_key = row.try_get::<i64, _>(5)? != 0;
    Ok(QueueState {
        paused: row.try_get::<i64, _>(0)? != 0,
        oldest_due: row.try_get(1)?,
        now: row.try_get(2)?,
        rate_limit: match limit {
            (Some(max), Some(per_ms)) => {
                let limit = stored_limit(queue, max, per_ms);
                Some(if per_key { limit.per_key() } else { limit })
            }
            _ => None,
        },
    })
}
