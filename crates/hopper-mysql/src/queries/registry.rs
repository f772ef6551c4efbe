//! Live workers and throughput buckets ([`hopper_core::registry`]): a heartbeat's
//! statements, a stopped worker removed, the workers listed, and a queue's buckets.
//!
//! A heartbeat that carries counts is one transaction, so that what it settled is counted
//! once or, when it fails, not at all (the worker sends the counts again with its next
//! report); one of an idle worker is its row's upsert alone, one statement every few
//! seconds. At most once a minute per broker, a heartbeat also deletes the workers whose
//! report expired and the buckets no longer kept, so that the tables stay as small as what
//! they list without a task of their own. Reads filter by the same times, so nothing
//! expired is listed between prunes.

use hopper_core::job::validate_queue_name;
use hopper_core::{
    Bucket, Error, Millis, QueueBeat, Result, ScheduleBeat, Throughput, WorkerBeat, WorkerInfo,
};
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use crate::sql::{self, MAX_LIST, fixed, padded};

/// The longest ttl a report is given: about 8,000 years, so that `now + ttl` stays far
/// inside a BIGINT whatever the clock reads.
const MAX_TTL: Millis = 253_402_300_799_999;

/// A worker's report, checked and encoded once, before any connection is taken.
#[derive(Debug)]
pub(crate) struct Beat {
    id: String,
    host: String,
    pid: i64,
    started_at: Millis,
    ttl: Millis,
    /// The worker's queues as JSON.
    queues: String,
    /// The worker's schedules as JSON, stored beside its queues in the same statement.
    schedules: String,
    /// What it settled, per queue, in name order (the order buckets are locked in).
    settled: Vec<(String, Throughput)>,
}

impl Beat {
    /// Refuses a report the tables cannot hold: an empty or overlong id or host, or a
    /// settled queue whose name is invalid.
    pub(crate) fn new(beat: &WorkerBeat) -> Result<Beat> {
        beat.validate()?;
        for (queue, _) in &beat.settled {
            validate_queue_name(queue)?;
        }
        let encode = |e: serde_json::Error| Error::Encode(e.to_string());
        let queues = serde_json::to_string(&beat.worker.queues).map_err(encode)?;
        let schedules = serde_json::to_string(&beat.worker.schedules).map_err(encode)?;
        let mut settled = beat.settled.clone();
        settled.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Beat {
            id: beat.worker.id.clone(),
            host: beat.worker.host.clone(),
            pid: i64::from(beat.worker.pid),
            started_at: beat.worker.started_at,
            ttl: beat.ttl_millis().min(MAX_TTL),
            queues,
            schedules,
            settled,
        })
    }
}

/// A count as a BIGINT, saturating.
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Beat {
    /// Whether the report carries counts: then it needs a transaction; else its row alone
    /// is one statement.
    pub(crate) fn settled_any(&self) -> bool {
        !self.settled.is_empty()
    }
}

/// Records a report, and with `prune` deletes what expired; to run inside a transaction
/// when it settled anything or prunes (see the module docs).
pub(crate) async fn heartbeat(
    conn: &mut MySqlConnection,
    beat: &Beat,
    now: Option<Millis>,
    prune: bool,
) -> Result<(), sqlx::Error> {
    if prune {
        sqlx::query(fixed(&sql::WORKERS_EXPIRE))
            .bind(now)
            .execute(&mut *conn)
            .await?;
        sqlx::query(fixed(&sql::THROUGHPUT_EXPIRE))
            .bind(now)
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query(fixed(&sql::WORKER_BEAT))
        .bind(&beat.id)
        .bind(&beat.host)
        .bind(beat.pid)
        .bind(beat.started_at)
        .bind(now)
        .bind(now)
        .bind(beat.ttl)
        .bind(&beat.queues)
        .bind(&beat.schedules)
        .execute(&mut *conn)
        .await?;
    for chunk in beat.settled.chunks(MAX_LIST) {
        // Padded with copies of the last queue adding nothing (see `sql`).
        let size = padded(chunk.len());
        let text = sql::throughput_add(size);
        let last = &chunk[chunk.len() - 1].0;
        let mut query = sqlx::query(&text);
        for i in 0..size {
            let (queue, counts) = chunk
                .get(i)
                .map_or((last, Throughput::default()), |(q, c)| (q, *c));
            query = query
                .bind(queue.as_str())
                .bind(now)
                .bind(count(counts.completed))
                .bind(count(counts.failed))
                .bind(count(counts.dead));
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Removes a worker; returns whether it was listed.
pub(crate) async fn deregister(conn: &mut MySqlConnection, id: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(fixed(&sql::WORKER_REMOVE))
        .bind(id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// The workers whose report has not expired, oldest first.
pub(crate) async fn workers(
    conn: &mut MySqlConnection,
    now: Option<Millis>,
) -> Result<Vec<WorkerInfo>, sqlx::Error> {
    let rows = sqlx::query(fixed(&sql::WORKERS_LIVE))
        .bind(now)
        .fetch_all(conn)
        .await?;
    rows.iter().map(worker_from_row).collect()
}

/// A worker's row. Its queues and schedules are read leniently, as job headers are: a row
/// whose JSON does not parse (another program wrote it) is listed without them, and a
/// warning, rather than failing the whole listing.
fn worker_from_row(row: &MySqlRow) -> Result<WorkerInfo, sqlx::Error> {
    // `utf8mb4_bin` reaches the client flagged binary, as `ascii_bin` does (see `rows`).
    let id: String = row.try_get_unchecked(0)?;
    let pid: i64 = row.try_get(2)?;
    let queues: String = row.try_get(6)?;
    let queues: Vec<QueueBeat> = lenient(&id, "queues", serde_json::from_str(&queues));
    let schedules: String = row.try_get(7)?;
    let schedules: Vec<ScheduleBeat> = lenient(&id, "schedules", serde_json::from_str(&schedules));
    Ok(WorkerInfo {
        host: row.try_get(1)?,
        pid: u32::try_from(pid).unwrap_or(0),
        started_at: row.try_get(3)?,
        heartbeat_at: row.try_get(4)?,
        expires_at: row.try_get(5)?,
        queues,
        schedules,
        id,
    })
}

/// A list of a worker's row as its JSON parsed, or no list (and a warning naming the
/// worker and the column) when it did not parse.
fn lenient<T>(worker: &str, column: &str, parsed: serde_json::Result<Vec<T>>) -> Vec<T> {
    parsed.unwrap_or_else(|e| {
        tracing::warn!(%worker, error = %e, "a worker's {column} cannot be read; listed without them");
        Vec::new()
    })
}

/// A queue's buckets of the last hour, oldest first.
pub(crate) async fn buckets(
    conn: &mut MySqlConnection,
    queue: &str,
    now: Option<Millis>,
) -> Result<Vec<Bucket>, sqlx::Error> {
    let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(fixed(&sql::THROUGHPUT_BUCKETS))
        .bind(queue)
        .bind(now)
        .fetch_all(conn)
        .await?;
    let count = |n: i64| n.max(0) as u64;
    Ok(rows
        .into_iter()
        .map(|(at, completed, failed, dead)| Bucket {
            at,
            counts: Throughput {
                completed: count(completed),
                failed: count(failed),
                dead: count(dead),
            },
        })
        .collect())
}
