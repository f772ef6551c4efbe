//! A file from before worker schedules (schema version 6) gains their column and keeps its
//! workers: a report stored by an older worker lists with no schedules, and the next
//! report's schedules are stored and listed as reported.

use std::time::Duration;

use hopper_core::{Broker, QueueBeat, ScheduleBeat, WorkerBeat, WorkerInfo};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

/// Far enough ahead (the year 2255) that the old rows stay live on the real clock.
const LATER: i64 = 9_000_000_000_000;

/// The old worker's queues, as a version 6 report wrote them.
const OLD_QUEUES: &str = r#"[{"queue": "q", "concurrency": 4, "held": 0, "running": 0,
    "window": 4, "paused": false}]"#;

#[tokio::test]
async fn a_file_from_before_schedules_gains_their_column_and_keeps_its_workers() {
    let db = TempDb::new("schedules_migrate");
    let raw = file_at_version(&db, 6);
    // Two reports as version 6 wrote them: one live, and one written again below.
    raw.execute_batch(&format!(
        "INSERT INTO hopper_workers (id, host, pid, started_at, heartbeat_at, expires_at,
                                     queues)
         VALUES ('old', 'h', 1, 100, 200, {LATER}, '{OLD_QUEUES}'),
                ('again', 'h', 2, 300, 400, {LATER}, '[]');"
    ))
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let listed = broker.workers().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["old", "again"]);
    let q = QueueBeat {
        queue: "q".into(),
        concurrency: 4,
        window: 4,
        ..QueueBeat::default()
    };
    assert_eq!(
        listed[0].queues,
        vec![q],
        "the old report's queues carried over"
    );
    assert!(listed.iter().all(|w| w.schedules.is_empty()), "{listed:?}");

    let nightly = ScheduleBeat {
        name: "nightly".into(),
        queue: "reports".into(),
        spec: "0 3 * * *".into(),
        next_at: Some(LATER),
        last_at: None,
    };
    let mut worker = WorkerInfo::this_process(300, vec![]);
    worker.id = "again".into();
    worker.schedules = vec![nightly.clone()];
    let beat = WorkerBeat {
        worker,
        ttl: Duration::from_secs(30),
        settled: vec![],
    };
    broker.heartbeat(&beat).await.unwrap();
    let listed = broker.workers().await.unwrap();
    let schedules: Vec<(&str, &[ScheduleBeat])> = listed
        .iter()
        .map(|w| (w.id.as_str(), w.schedules.as_slice()))
        .collect();
    assert_eq!(schedules, [("old", &[][..]), ("again", &[nightly][..])]);
    drop(broker);

    assert_eq!(file_version(&db), 12);
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let old: String = raw
        .query_row(
            "SELECT schedules FROM hopper_workers WHERE id = 'old'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(old, "[]", "the column's default, stored in the old row");
}
