//! A file from before the worker registry (schema version 4) gains its tables and keeps
//! its jobs: workers report to it and its queues count what they settle from then on.

use std::time::Duration;

use hopper_core::{Broker, JobId, QueueBeat, Throughput, WorkerBeat, WorkerInfo};
use hopper_sqlite::SqliteBroker;

use super::support::{TempDb, file_at_version, file_version};

#[tokio::test]
async fn a_file_from_before_the_registry_gains_its_tables_and_keeps_its_jobs() {
    let db = TempDb::new("registry_migrate");
    let raw = file_at_version(&db, 4);
    raw.execute_batch(
        "INSERT INTO hopper_jobs (id, queue, state, priority, run_at, attempt, max_attempts,
                                  payload, created_at, last_error, errors, finished_at)
         VALUES (1, 'q', 0, 0, 1000, 0, 5, CAST('due' AS BLOB), 1000, NULL, NULL, NULL),
                (2, 'q', 3, 0, 1000, 5, 5, CAST('dead' AS BLOB), 1000, 'boom',
                 '[{\"attempt\": 5, \"at\": 3000, \"error\": \"boom\"}]', 3000);
         INSERT INTO hopper_paused (queue, paused_at) VALUES ('q', 2000);",
    )
    .unwrap();
    drop(raw);

    let broker = SqliteBroker::open(db.path()).await.unwrap();
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!((stats.counts.pending, stats.counts.dead), (1, 1));
    assert!(stats.paused, "the pause carried over");
    let none = Throughput::default();
    assert_eq!(
        (stats.last_minute, stats.last_hour),
        (Some(none), Some(none)),
        "nothing settled yet"
    );
    let dead = broker.job(JobId(2)).await.unwrap().unwrap();
    assert_eq!(dead.errors.len(), 1, "the history carried over");

    let q = QueueBeat {
        queue: "q".into(),
        concurrency: 2,
        ..QueueBeat::default()
    };
    let beat = WorkerBeat {
        worker: WorkerInfo::this_process(1000, vec![q.clone()]),
        ttl: Duration::from_secs(30),
        settled: vec![(
            "q".into(),
            Throughput {
                completed: 3,
                failed: 1,
                dead: 0,
            },
        )],
    };
    broker.heartbeat(&beat).await.unwrap();
    let listed = broker.workers().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), &listed[0].queues),
        (beat.worker.id.as_str(), &vec![q])
    );
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(stats.last_minute.unwrap().completed, 3);
    assert_eq!(broker.throughput("q").await.unwrap().len(), 1);
    drop(broker);

    assert_eq!(file_version(&db), 12);
    let raw = rusqlite::Connection::open(db.path()).unwrap();
    let mut names = raw
        .prepare("SELECT name FROM sqlite_schema WHERE name LIKE 'hopper_%' ORDER BY name")
        .unwrap();
    let names: Vec<String> = names
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    for name in [
        "hopper_throughput",
        "hopper_throughput_age",
        "hopper_workers",
        "hopper_workers_expiry",
    ] {
        assert!(names.iter().any(|n| n == name), "no {name} in {names:?}");
    }
}
