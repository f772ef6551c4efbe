//! Live workers and throughput buckets ([`hopper_core::registry`]) in two tables of the
//! schema, `hopper_workers` and `hopper_throughput`, so that every process sharing the
//! database lists the same workers and sums the same counts.
//!
//! A report is one statement (heartbeat.sql): it writes the worker's row, adds what it
//! settled to the running bucket of each queue, and deletes expired workers and buckets
//! past keeping, so the tables need no upkeep of their own. The worker's queues and
//! schedules are JSON columns, each list written whole by every report: a worker says
//! all it holds each time, so nothing of an earlier report needs merging. Times are the
//! broker's `now`, as for leases: the database clock unless the broker was given a
//! clock. A report is never sent twice: its counts add up, so one applied before its
//! connection was lost would count twice, and a report that fails hands its counts to the
//! worker's next one.

use hopper_core::admin::Throughput;
use hopper_core::job::validate_queue_name;
use hopper_core::registry::{
    BUCKET, Bucket, KEPT, QueueBeat, ScheduleBeat, WorkerBeat, WorkerInfo,
};
use hopper_core::{Error, Millis, Result};

use super::PgBroker;

/// The span of a bucket, in ms, as the statements take it.
pub(super) fn bucket_ms() -> i64 {
    BUCKET.as_millis() as i64
}

/// A count as the tables store it.
fn stored(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

/// A bucket from its columns.
fn bucket(at: Millis, completed: i64, failed: i64, dead: i64) -> Bucket {
    Bucket {
        at,
        counts: Throughput {
            completed: completed.max(0) as u64,
            failed: failed.max(0) as u64,
            dead: dead.max(0) as u64,
        },
    }
}

/// Buckets from the parallel arrays queue_stats.sql returns, oldest first.
pub(super) fn buckets(at: &[i64], completed: &[i64], failed: &[i64], dead: &[i64]) -> Vec<Bucket> {
    at.iter()
        .zip(completed.iter().zip(failed.iter().zip(dead)))
        .map(|(&at, (&completed, (&failed, &dead)))| bucket(at, completed, failed, dead))
        .collect()
}

/// A row of workers.sql: id, host, pid, started_at, heartbeat_at, expires_at, and the
/// queues and the schedules as JSON text.
type WorkerRow = (String, String, i64, Millis, Millis, Millis, String, String);

/// A worker's list of column `what`, as read from its JSON. A value that could not be
/// read (another program wrote the column) is logged and taken as an empty list: one such
/// row must not hide every other worker, nor the rest of its own row.
fn json_list<T>(worker: &str, what: &str, read: serde_json::Result<Vec<T>>) -> Vec<T> {
    read.unwrap_or_else(|e| {
        tracing::warn!(worker = %worker, column = what, error = %e,
            "a list of a listed worker cannot be read; it is listed as empty");
        Vec::new()
    })
}

/// A worker from its row.
fn worker_from_row(row: WorkerRow) -> WorkerInfo {
    let (id, host, pid, started_at, heartbeat_at, expires_at, queues, schedules) = row;
    let queues: Vec<QueueBeat> = json_list(&id, "queues", serde_json::from_str(&queues));
    let schedules: Vec<ScheduleBeat> =
        json_list(&id, "schedules", serde_json::from_str(&schedules));
    WorkerInfo {
        id,
        host,
        pid: pid.clamp(0, i64::from(u32::MAX)) as u32,
        started_at,
        heartbeat_at,
        expires_at,
        queues,
        schedules,
    }
}

impl PgBroker {
    /// [`Broker::heartbeat`](hopper_core::Broker::heartbeat).
    pub(super) async fn report_worker(&self, beat: &WorkerBeat) -> Result<()> {
        beat.validate()?;
        let n = beat.settled.len();
        let (mut queues, mut completed) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut failed, mut dead) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (queue, counts) in &beat.settled {
            validate_queue_name(queue)?;
            queues.push(queue.as_str());
            completed.push(stored(counts.completed));
            failed.push(stored(counts.failed));
            dead.push(stored(counts.dead));
        }
        let worker = &beat.worker;
        let queues_json = serde_json::to_string(&worker.queues)
            .map_err(|e| Error::broker("encoding a worker's queues", e))?;
        let schedules_json = serde_json::to_string(&worker.schedules)
            .map_err(|e| Error::broker("encoding a worker's schedules", e))?;
        let mut held = self.inner.conns.get().await?;
        sqlx::query(&self.inner.sql.heartbeat)
            .bind(&worker.id)
            .bind(&worker.host)
            .bind(i64::from(worker.pid))
            .bind(worker.started_at)
            .bind(beat.ttl_millis())
            .bind(queues_json)
            .bind(self.now())
            .bind(&queues)
            .bind(&completed)
            .bind(&failed)
            .bind(&dead)
            .bind(bucket_ms())
            .bind(KEPT.as_millis() as i64)
            .bind(schedules_json)
            .execute(held.conn())
            .await
            .map_err(|e| held.fail("recording a worker's report", e))?;
        Ok(())
    }

    /// [`Broker::deregister`](hopper_core::Broker::deregister).
    pub(super) async fn remove_worker(&self, worker: &str) -> Result<bool> {
        let mut held = self.inner.conns.get().await?;
        let gone: Option<String> = sqlx::query_scalar(&self.inner.sql.deregister)
            .bind(worker)
            .fetch_optional(held.conn())
            .await
            .map_err(|e| held.fail("removing a worker", e))?;
        Ok(gone.is_some())
    }

    /// [`Broker::workers`](hopper_core::Broker::workers).
    pub(super) async fn live_workers(&self) -> Result<Vec<WorkerInfo>> {
        let mut held = self.inner.conns.get().await?;
        let rows: Vec<WorkerRow> = sqlx::query_as(&self.inner.sql.workers)
            .bind(self.now())
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("listing workers", e))?;
        Ok(rows.into_iter().map(worker_from_row).collect())
    }

    /// [`Broker::throughput`](hopper_core::Broker::throughput).
    pub(super) async fn queue_throughput(&self, queue: &str) -> Result<Vec<Bucket>> {
        validate_queue_name(queue)?;
        let mut held = self.inner.conns.get().await?;
        let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(&self.inner.sql.throughput)
            .bind(queue)
            .bind(self.now())
            .bind(bucket_ms())
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("reading a queue's throughput", e))?;
        Ok(rows
            .into_iter()
            .map(|(at, completed, failed, dead)| bucket(at, completed, failed, dead))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of workers.sql with the given queues and schedules.
    fn row(queues: &str, schedules: &str) -> WorkerRow {
        (
            "h:1:a".to_owned(),
            "h".to_owned(),
            1,
            10,
            20,
            30,
            queues.to_owned(),
            schedules.to_owned(),
        )
    }

    const QUEUES: &str =
        r#"[{"queue":"q","concurrency":2,"held":1,"running":1,"window":4,"paused":true}]"#;
    const SCHEDULES: &str =
        r#"[{"name":"nightly","queue":"q","spec":"0 3 * * * (UTC)","next_at":5}]"#;

    #[test]
    fn unreadable_queues_list_the_worker_with_none() {
        let unreadable = worker_from_row(row("{\"not\": \"a list\"}", SCHEDULES));
        assert!(unreadable.queues.is_empty());
        assert_eq!(unreadable.schedules.len(), 1, "the schedules still read");
        let read = worker_from_row(row(QUEUES, "[]"));
        assert_eq!(read.queues.len(), 1);
        assert_eq!(
            (read.queues[0].concurrency, read.queues[0].paused),
            (2, true)
        );
        assert_eq!(
            (read.id.as_str(), read.pid, read.expires_at),
            ("h:1:a", 1, 30)
        );
    }

    /// Schedules read as reported, the optional times left out reading as none; a value
    /// that is not a list of schedules reads as no schedules, the rest of the row intact.
    #[test]
    fn unreadable_schedules_list_the_worker_with_none() {
        let read = worker_from_row(row(QUEUES, SCHEDULES));
        assert_eq!(
            read.schedules,
            [ScheduleBeat {
                name: "nightly".into(),
                queue: "q".into(),
                spec: "0 3 * * * (UTC)".into(),
                next_at: Some(5),
                last_at: None,
            }]
        );
        for unreadable in ["{}", "\"nightly\"", r#"[{"name":"nightly"}]"#, "[1]"] {
            let worker = worker_from_row(row(QUEUES, unreadable));
            assert!(worker.schedules.is_empty(), "{unreadable}");
            assert_eq!(worker.queues.len(), 1, "{unreadable}");
            assert_eq!(worker.id, "h:1:a");
        }
    }
}
