//! Live workers and throughput buckets ([`hopper_core::registry`]) as they run on the
//! database thread: a worker's report stored, a stopped worker removed, the live workers
//! and a queue's recent buckets read. Each takes `now` from its caller, the broker's clock,
//! as leases do, so that expiry and buckets follow a paused clock in tests.
//!
//! Every report also deletes the workers whose report expired and the buckets older than
//! [`KEPT`], each by its index, so that neither table grows with time and no reader has to
//! skip stale rows for long.

use hopper_core::Millis;
use hopper_core::admin::Throughput;
use hopper_core::registry::{Bucket, KEPT, WorkerBeat, WorkerInfo, bucket_of};
use rusqlite::{Connection, Row, params};

use crate::sql;

/// How far back [`buckets`] reads: the buckets that started within the last hour.
const HOUR: Millis = 3_600_000;

/// Stores `beat` at `now`: the worker listed until `now` plus its ttl, its settled counts
/// added to the bucket of `now`, and whatever expired deleted. The caller checked the
/// report and its queue names.
pub(crate) fn heartbeat(conn: &Connection, beat: &WorkerBeat, now: Millis) -> rusqlite::Result<()> {
    let w = &beat.worker;
    let queues = serde_json::to_string(&w.queues).expect("a worker's queues serialize to JSON");
    let schedules =
        serde_json::to_string(&w.schedules).expect("a worker's schedules serialize to JSON");
    let expires = now.saturating_add(beat.ttl_millis());
    conn.prepare_cached(sql::UPSERT_WORKER)?.execute(params![
        w.id,
        w.host,
        w.pid,
        w.started_at,
        now,
        expires,
        queues,
        schedules
    ])?;
    let bucket = bucket_of(now);
    let mut add = conn.prepare_cached(sql::ADD_THROUGHPUT)?;
    for (queue, counts) in &beat.settled {
        if counts.is_empty() {
            continue;
        }
        add.execute(params![
            queue,
            bucket,
            stored(counts.completed),
            stored(counts.failed),
            stored(counts.dead)
        ])?;
    }
    conn.prepare_cached(sql::PRUNE_WORKERS)?
        .execute(params![now])?;
    let oldest = now.saturating_sub(KEPT.as_millis() as Millis);
    conn.prepare_cached(sql::PRUNE_THROUGHPUT)?
        .execute(params![oldest])?;
    Ok(())
}

/// Removes a worker; returns whether it was listed.
pub(crate) fn deregister(conn: &Connection, worker: &str) -> rusqlite::Result<bool> {
    let deleted = conn
        .prepare_cached(sql::DEREGISTER_WORKER)?
        .execute(params![worker])?;
    Ok(deleted > 0)
}

/// The workers whose report has not expired at `now`, by start time then id. Sorted here
/// rather than in SQL: the expiry index gives no such order, and a sort there would build
/// a temporary tree for the handful of rows that are live.
pub(crate) fn workers(conn: &Connection, now: Millis) -> rusqlite::Result<Vec<WorkerInfo>> {
    let mut live = conn
        .prepare_cached(sql::LIVE_WORKERS)?
        .query_map(params![now], worker_from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    live.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
    Ok(live)
}

/// `queue`'s buckets that started within the hour before the bucket of `now`, oldest
/// first. The caller checked the name.
pub(crate) fn buckets(
    conn: &Connection,
    queue: &str,
    now: Millis,
) -> rusqlite::Result<Vec<Bucket>> {
    let after = bucket_of(now) - HOUR;
    conn.prepare_cached(sql::THROUGHPUT)?
        .query_map(params![queue, after], |row| {
            Ok(Bucket {
                at: row.get(0)?,
                counts: Throughput {
                    completed: count(row.get(1)?),
                    failed: count(row.get(2)?),
                    dead: count(row.get(3)?),
                },
            })
        })?
        .collect()
}

/// A row of `LIVE_WORKERS`. Queues or schedules that cannot be read (a report of another
/// version, or a row written by another program) leave the worker listed with none, and a
/// warning: one bad row must not hide every worker.
fn worker_from_row(row: &Row<'_>) -> rusqlite::Result<WorkerInfo> {
    let id: String = row.get(0)?;
    let queues: String = row.get(6)?;
    let schedules: String = row.get(7)?;
    Ok(WorkerInfo {
        queues: or_none(&id, "queues", serde_json::from_str(&queues)),
        schedules: or_none(&id, "schedules", serde_json::from_str(&schedules)),
        id,
        host: row.get(1)?,
        pid: row.get(2)?,
        started_at: row.get(3)?,
        heartbeat_at: row.get(4)?,
        expires_at: row.get(5)?,
    })
}

/// A list of a worker's row as read, or none when it could not be (`what` names it in the
/// warning).
fn or_none<T>(worker: &str, what: &str, read: serde_json::Result<Vec<T>>) -> Vec<T> {
    read.unwrap_or_else(|e| {
        tracing::warn!(%worker, error = %e, "a worker's {what} cannot be read; listed with none");
        Vec::new()
    })
}

/// A count as stored: SQLite's integers are signed.
fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stored count; a negative one, which no report writes, reads as none.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hopper_core::registry::{QueueBeat, ScheduleBeat, WorkerBeat, WorkerInfo};
    use rusqlite::Connection;

    use super::*;

    fn migrated() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for migration in sql::MIGRATIONS {
            conn.execute_batch(migration).unwrap();
        }
        conn
    }

    fn beat(id: &str, started_at: Millis) -> WorkerBeat {
        let queue = QueueBeat {
            queue: "q".into(),
            ..QueueBeat::default()
        };
        let mut worker = WorkerInfo::this_process(started_at, vec![queue]);
        worker.id = id.into();
        worker.schedules = vec![ScheduleBeat {
            name: "nightly".into(),
            queue: "q".into(),
            spec: "0 3 * * *".into(),
            next_at: Some(started_at + 1_000),
            last_at: None,
        }];
        WorkerBeat {
            worker,
            ttl: Duration::from_secs(30),
            settled: vec![],
        }
    }

    /// A row whose queues cannot be read is listed with none rather than failing the call.
    #[test]
    fn unreadable_queues_list_the_worker_with_none() {
        let conn = migrated();
        heartbeat(&conn, &beat("b", 2), 1_000).unwrap();
        heartbeat(&conn, &beat("a", 1), 1_000).unwrap();
        conn.execute(
            "UPDATE hopper_workers SET queues = 'not json' WHERE id = 'b'",
            [],
        )
        .unwrap();
        let live = workers(&conn, 1_000).unwrap();
        let listed: Vec<(&str, usize)> = live
            .iter()
            .map(|w| (w.id.as_str(), w.queues.len()))
            .collect();
        assert_eq!(listed, [("a", 1), ("b", 0)]);
    }

    /// Schedules that are JSON but not a list of schedules read as none, the worker and its
    /// queues listed as reported; the other worker's schedules read back as written.
    #[test]
    fn unreadable_schedules_list_the_worker_with_none() {
        let conn = migrated();
        heartbeat(&conn, &beat("a", 1), 1_000).unwrap();
        heartbeat(&conn, &beat("b", 2), 1_000).unwrap();
        conn.execute(
            r#"UPDATE hopper_workers SET schedules = '{"name": "nightly"}' WHERE id = 'b'"#,
            [],
        )
        .unwrap();
        let live = workers(&conn, 1_000).unwrap();
        let listed: Vec<(&str, usize, usize)> = live
            .iter()
            .map(|w| (w.id.as_str(), w.queues.len(), w.schedules.len()))
            .collect();
        assert_eq!(listed, [("a", 1, 1), ("b", 1, 0)]);
        assert_eq!(live[0].schedules, beat("a", 1).worker.schedules);
    }

    /// Reports add into one bucket, and a later report deletes expired workers and buckets.
    #[test]
    fn reports_add_up_and_prune() {
        let conn = migrated();
        let mut first = beat("a", 0);
        let t = |completed| Throughput {
            completed,
            failed: 1,
            dead: 0,
        };
        first.settled = vec![("q".into(), t(2))];
        heartbeat(&conn, &first, 1_000_000).unwrap();
        heartbeat(&conn, &first, 1_005_000).unwrap();
        let got = buckets(&conn, "q", 1_005_000).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].at, got[0].counts),
            (1_000_000, Throughput { failed: 2, ..t(4) })
        );
        let later = 1_005_000 + KEPT.as_millis() as Millis + 10_000;
        heartbeat(&conn, &beat("b", 0), later).unwrap();
        let rows: i64 = conn
            .query_row("SELECT (SELECT count(*) FROM hopper_throughput) + (SELECT count(*) FROM hopper_workers)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "only b's report is left");
    }
}
