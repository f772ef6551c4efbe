//! Versioned migrations, the version check at connect, a database of the previous version
//! brought up to date, and refusals that name the URL without its password.

use std::time::Duration;

use hopper_core::{
    Broker, Enqueued, FetchRequest, JobId, JobQuery, JobState, LeaseId, ListState, NewJob, Outcome,
    QueueBeat, ScheduleBeat, Selection, Settlement, Throughput, WorkerBeat, WorkerInfo,
};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use sqlx::{Connection, MySqlConnection};

use super::support::{TempDatabase, admin, url_for};

/// The crate's migrations, in order, to make a database as an earlier release left it.
const MIGRATIONS: [&str; 11] = [
    include_str!("../../migrations/0001_create_jobs.sql"),
    include_str!("../../migrations/0002_range_checks.sql"),
    include_str!("../../migrations/0003_errors_and_pauses.sql"),
    include_str!("../../migrations/0004_workers.sql"),
    include_str!("../../migrations/0005_unique_keys.sql"),
    include_str!("../../migrations/0006_worker_schedules.sql"),
    include_str!("../../migrations/0007_record_unique_keys.sql"),
    include_str!("../../migrations/0008_ordering_keys.sql"),
    include_str!("../../migrations/0009_rate_limits.sql"),
    include_str!("../../migrations/0010_groups.sql"),
    include_str!("../../migrations/0011_rate_keys.sql"),
];

/// Builds the schema of the first `version` migrations on `conn`, recorded as applied,
/// for a test to fill before `migrate` brings it up from there.
pub(super) async fn database_at(conn: &mut MySqlConnection, version: usize) {
    for m in &MIGRATIONS[..version] {
        sqlx::raw_sql(m).execute(&mut *conn).await.unwrap();
    }
    let table = include_str!("../../sql/migrations_table.sql");
    sqlx::raw_sql(table).execute(&mut *conn).await.unwrap();
    for v in 1..=version {
        sqlx::query("INSERT INTO hopper_migrations (version, applied_at) VALUES (?, 0)")
            .bind(v as i64)
            .execute(&mut *conn)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn an_unmigrated_database_is_refused_with_what_to_run() {
    let db = TempDatabase::empty().await;
    let err = MySqlBroker::connect(&db.url).await.unwrap_err();
    assert!(err.is_broker(), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "broker error: the hopper schema in {url} is at version 0 but this build needs 11: \
             run `hopper migrate --broker {url}`",
            url = db.url
        )
    );
}

#[tokio::test]
async fn migrating_twice_applies_nothing_the_second_time() {
    let db = TempDatabase::empty().await;
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 11);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let broker = MySqlBroker::connect(&db.url).await.unwrap();
    assert_eq!(broker.url(), db.url);
    broker.close().await;
}

#[tokio::test]
async fn concurrent_migrations_apply_each_version_once() {
    let db = TempDatabase::empty().await;
    let (a, b) = tokio::join!(
        hopper_mysql::migrate(&db.url),
        hopper_mysql::migrate(&db.url)
    );
    let mut applied = [a.unwrap(), b.unwrap()];
    applied.sort();
    assert_eq!(applied, [0, 11]);
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused() {
    let db = TempDatabase::migrated().await;
    admin(format!(
        "INSERT INTO {}.hopper_migrations (version, applied_at) VALUES (99, 0)",
        db.name
    ))
    .await;
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "the hopper schema in {} is at version 99, newer than this build (11): upgrade hopper",
            db.url
        )),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_named_without_its_password() {
    for url in [
        "mysql://root:s3cret@127.0.0.1:1/test".to_owned(),
        url_for("hopper_no_such_database").replacen("://root@", "://root:s3cret@", 1),
    ] {
        let shown = url.replace(":s3cret@", ":***@");
        let connect = MySqlBroker::connect(&url).await.unwrap_err();
        let migrate = hopper_mysql::migrate(&url).await.unwrap_err();
        for err in [connect, migrate] {
            assert!(err.is_broker(), "{err:?}");
            let text = format!("{err} {err:?}");
            assert!(
                text.contains(&format!("cannot connect to {shown}")),
                "{text}"
            );
            assert!(!text.contains("s3cret"), "{text}");
        }
    }
}

#[tokio::test]
async fn bad_urls_and_options_are_refused_with_the_setting_named() {
    let err = MySqlBroker::connect("mysql://root:s3cret@127.0.0.1:port/test")
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("invalid broker URL `mysql://root:***@127.0.0.1:port/test`"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");

    let err = MySqlBroker::connect("mysql://root@127.0.0.1:3306")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("naming the database"), "{err}");

    for n in [0, 65] {
        let err = MySqlBroker::connect_with(
            "mysql://root@127.0.0.1/test",
            MySqlOptions::default().connections(n),
        )
        .await
        .unwrap_err();
        assert!(err.is_config(), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("invalid connections `{n}`: allowed: 1..=64")
        );
    }
}

/// A database at version 2, as an earlier release left it, holding jobs in each state:
/// migrating adds the error history, the pause table and the index of finished jobs (and
/// the worker tables); the jobs stay readable, without a history, and are listed,
/// re-driven and worked as usual. A run that stopped before recording version 3 counts it
/// as applied the second time.
#[tokio::test]
async fn a_database_of_version_2_keeps_its_jobs() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 2).await;
    for setup in [
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at, lease_id, lease_expires, last_error, finished_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'pending', 0, NULL, NULL, NULL, NULL),
                (2, 'q', 1, 0, 1, 5, 'leased', 0, 7, 9000000000000, NULL, NULL),
                (3, 'q', 3, 0, 5, 5, 'dead', 0, NULL, NULL, 'boom', 5),
                (4, 'q', 4, 0, 0, 5, 'cancelled', 0, NULL, NULL, NULL, 6)",
    ] {
        sqlx::raw_sql(setup).execute(&mut conn).await.unwrap();
    }
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 2 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 9);

    let broker = MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None))
        .await
        .unwrap();
    let dead = broker.job(JobId(3)).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.last_error.as_deref(), dead.finished_at),
        (JobState::Dead, Some("boom"), Some(5))
    );
    assert!(dead.errors.is_empty(), "{dead:?}");
    let listed = broker
        .list_jobs(&JobQuery::new("q", ListState::Dead, 10))
        .await
        .unwrap();
    assert_eq!(listed.jobs, vec![dead]);
    let leased = broker
        .list_jobs(&JobQuery::new("q", ListState::Leased, 10))
        .await
        .unwrap();
    assert_eq!(leased.jobs.len(), 1);
    assert_eq!(leased.jobs[0].job.lease, LeaseId(7));
    assert_eq!(broker.queues().await.unwrap(), ["q"]);

    assert_eq!(
        broker
            .retry_dead(&Selection::Jobs(vec![JobId(3)]))
            .await
            .unwrap(),
        1
    );
    let held = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    let mut ids: Vec<i64> = held.jobs.iter().map(|j| j.id.0).collect();
    ids.sort();
    assert_eq!(ids, [1, 3]);
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        error: "again".into(),
        step_aside: false,
    };
    let report = broker
        .settle(vec![Settlement {
            job: JobId(3),
            lease: held.lease,
            outcome: retry,
        }])
        .await
        .unwrap();
    assert_eq!(report.applied, 1);
    let errors = broker.job(JobId(3)).await.unwrap().unwrap().errors;
    let history: Vec<(u32, &str)> = errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(history, [(1, "again")]);
    broker.close().await;

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 3")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 9);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let _ = conn.close().await;
}

/// A database at version 3, as an earlier release left it, holding jobs: migrating adds
/// the tables of live workers and throughput, which heartbeats then fill, and the jobs are
/// counted and worked as before. A run that stopped before recording version 4 finds the
/// tables there, keeps what they hold, and counts it as applied.
#[tokio::test]
async fn a_database_of_version_3_gains_the_worker_tables() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 3).await;
    for setup in [
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at, lease_id, lease_expires, last_error, finished_at,
                                  errors)
         VALUES (1, 'q', 0, 0, 0, 5, 'pending', 0, NULL, NULL, NULL, NULL, NULL),
                (2, 'q', 3, 0, 5, 5, 'dead', 0, NULL, NULL, 'boom', 5,
                 '[{\"attempt\": 5, \"at\": 5, \"error\": \"boom\"}]')",
    ] {
        sqlx::raw_sql(setup).execute(&mut conn).await.unwrap();
    }
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 3 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 8);

    let broker = MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None))
        .await
        .unwrap();
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.dead), (1, 1), "{counts:?}");
    let dead = broker.job(JobId(2)).await.unwrap().unwrap();
    assert_eq!(dead.errors.len(), 1, "{dead:?}");
    let held = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(held.jobs.len(), 1);

    let mut worker = WorkerInfo::this_process(
        0,
        vec![QueueBeat {
            queue: "q".into(),
            concurrency: 2,
            ..QueueBeat::default()
        }],
    );
    worker.started_at = 1;
    let done = Throughput {
        completed: 4,
        failed: 1,
        dead: 0,
    };
    let beat = WorkerBeat {
        worker: worker.clone(),
        ttl: Duration::from_secs(30),
        settled: vec![("q".into(), done)],
    };
    broker.heartbeat(&beat).await.unwrap();
    let listed = broker.workers().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (&listed[0].id, &listed[0].queues),
        (&worker.id, &worker.queues)
    );
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(
        (stats.last_minute, stats.last_hour),
        (Some(done), Some(done))
    );
    broker.close().await;

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 4")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 8);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let broker = MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None))
        .await
        .unwrap();
    assert_eq!(broker.workers().await.unwrap().len(), 1, "kept");
    assert_eq!(broker.throughput("q").await.unwrap().len(), 1, "kept");
    broker.close().await;
    let _ = conn.close().await;
}

/// A database at version 4, as an earlier release left it, holding a job: migrating adds
/// the table of unique keys (and the workers' schedules, and the column of records' keys),
/// after which a job enqueued with a key is stored once and its duplicate answers with it,
/// and the job already there is worked as before. A run that stopped before recording
/// version 5 finds the table there, keeps the holds it has, and counts it as applied.
#[tokio::test]
async fn a_database_of_version_4_gains_unique_keys() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 4).await;
    for setup in [
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'pending', 0)",
    ] {
        sqlx::raw_sql(setup).execute(&mut conn).await.unwrap();
    }
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 4 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 7);

    let connect = || MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None));
    let broker = connect().await.unwrap();
    let keyed = || vec![NewJob::new("q", "k").unique_key("k")];
    let first = broker.enqueue_reported(keyed()).await.unwrap();
    assert!(!first[0].existing, "{first:?}");
    let again = broker.enqueue_reported(keyed()).await.unwrap();
    assert_eq!(again, [Enqueued::existing(first[0].id)]);
    let held = broker
        .fetch(FetchRequest::one("q", 10, Duration::from_secs(30)))
        .await
        .unwrap();
    let ids: Vec<JobId> = held.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [JobId(1), first[0].id]);
    broker.close().await;

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 5")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 7);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let broker = connect().await.unwrap();
    let kept = broker.enqueue_reported(keyed()).await.unwrap();
    assert_eq!(kept, [Enqueued::existing(first[0].id)], "the hold was kept");
    broker.close().await;
    let _ = conn.close().await;
}

/// A database at version 5, as an earlier release left it, with a worker listed: its
/// row gains an empty list of schedules, so the listing reads it as a worker with none and
/// its queues as they were; its next report, and a new worker's, store their schedules.
/// A run that stopped before recording version 6 finds the column there, keeps what it
/// holds, and counts it as applied.
#[tokio::test]
async fn a_database_of_version_5_gains_worker_schedules() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    let queues = r#"[{"queue": "q", "concurrency": 2, "held": 0, "running": 0, "window": 2,
                      "paused": false}]"#;
    database_at(&mut conn, 5).await;
    for setup in [&format!(
        "INSERT INTO hopper_workers (id, host, pid, started_at, heartbeat_at, expires_at,
                                         queues)
             VALUES ('old:1:a', 'old', 1, 5, 5,
                     CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + 600000, '{queues}')"
    )] {
        sqlx::raw_sql(setup).execute(&mut conn).await.unwrap();
    }
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 5 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 6);

    let connect = || MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None));
    let broker = connect().await.unwrap();
    let listed = broker.workers().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let old = &listed[0];
    assert_eq!((old.id.as_str(), old.schedules.len()), ("old:1:a", 0));
    let window: Vec<(&str, usize)> = old.queues.iter().map(|q| (&*q.queue, q.window)).collect();
    assert_eq!(window, [("q", 2)], "its queues as they were");

    let hourly = ScheduleBeat {
        name: "hourly".into(),
        queue: "q".into(),
        spec: "every 1h".into(),
        next_at: Some(3_600_000),
        last_at: None,
    };
    let again = WorkerInfo {
        schedules: vec![hourly.clone()],
        ..old.clone()
    };
    let mut new = WorkerInfo::this_process(6, vec![]);
    new.schedules = vec![hourly.clone(), ScheduleBeat::default()];
    for worker in [&again, &new] {
        let beat = WorkerBeat {
            worker: worker.clone(),
            ttl: Duration::from_secs(30),
            settled: vec![],
        };
        broker.heartbeat(&beat).await.unwrap();
    }
    let schedules = |listed: Vec<WorkerInfo>| -> Vec<(String, Vec<ScheduleBeat>)> {
        listed.into_iter().map(|w| (w.id, w.schedules)).collect()
    };
    let reported = vec![
        (again.id.clone(), again.schedules.clone()),
        (new.id.clone(), new.schedules.clone()),
    ];
    assert_eq!(schedules(broker.workers().await.unwrap()), reported);
    broker.close().await;

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 6")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 6);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let broker = connect().await.unwrap();
    assert_eq!(schedules(broker.workers().await.unwrap()), reported, "kept");
    broker.close().await;
    let _ = conn.close().await;
}

/// A database at version 6, holding a job that took a unique key then: migrating adds the
/// column of records' keys, NULL for that job, whose record shows no key while its hold
/// still stands; jobs enqueued after with a key show it, looked up and listed either way,
/// and a job without one that shared their batch shows none. A run that stopped before
/// recording version 7 finds the column there, keeps what it holds, and counts it as
/// applied.
#[tokio::test]
async fn a_database_of_version_6_gains_the_keys_of_records() {
    let db = TempDatabase::empty().await;
    let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
    database_at(&mut conn, 6).await;
    for setup in [
        "INSERT INTO hopper_jobs (id, queue, state, run_at, attempt, max_attempts, payload,
                                  created_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'old', 0)",
        "INSERT INTO hopper_unique (queue, `key`, job_id, scope, until)
         VALUES ('q', 'old', 1, 1, NULL)",
    ] {
        sqlx::raw_sql(setup).execute(&mut conn).await.unwrap();
    }
    let err = MySqlBroker::connect(&db.url).await.unwrap_err().to_string();
    assert!(
        err.contains("at version 6 but this build needs 11"),
        "{err}"
    );
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 5);

    let connect = || MySqlBroker::connect_with(&db.url, MySqlOptions::default().wake_poll(None));
    let broker = connect().await.unwrap();
    let old = broker.job(JobId(1)).await.unwrap().unwrap();
    assert_eq!(old.unique_key, None, "{old:?}");
    let again = broker
        .enqueue_reported(vec![NewJob::new("q", "dup").unique_key("old")])
        .await
        .unwrap();
    assert_eq!(again, [Enqueued::existing(JobId(1))], "its hold stands");
    let batch = vec![
        NewJob::new("q", "new").unique_key("new"),
        NewJob::new("q", "plain"),
    ];
    let stored = broker.enqueue_reported(batch).await.unwrap();
    assert!(stored.iter().all(|e| !e.existing), "{stored:?}");
    let new = broker.job(stored[0].id).await.unwrap().unwrap();
    assert_eq!(new.unique_key.as_deref(), Some("new"), "{new:?}");
    let listed_keys = |newest_first| {
        let broker = &broker;
        async move {
            let query = JobQuery {
                newest_first,
                ..JobQuery::new("q", ListState::Pending, 10)
            };
            let page = broker.list_jobs(&query).await.unwrap();
            let keys: Vec<(JobId, Option<String>)> = page
                .jobs
                .into_iter()
                .map(|r| (r.job.id, r.unique_key))
                .collect();
            keys
        }
    };
    let mut listed = vec![
        (JobId(1), None),
        (stored[0].id, Some("new".to_owned())),
        (stored[1].id, None),
    ];
    assert_eq!(listed_keys(false).await, listed);
    listed.reverse();
    assert_eq!(listed_keys(true).await, listed);
    broker.close().await;

    sqlx::raw_sql("DELETE FROM hopper_migrations WHERE version >= 7")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 5);
    assert_eq!(hopper_mysql::migrate(&db.url).await.unwrap(), 0);
    let broker = connect().await.unwrap();
    let kept = broker.job(stored[0].id).await.unwrap().unwrap();
    assert_eq!(kept.unique_key.as_deref(), Some("new"), "kept");
    broker.close().await;
    let _ = conn.close().await;
}
