//! Versioned migrations and the version check at connect.

use hopper_postgres::{PgBroker, PgOptions};
use hopper_testkit::unique_name;

use super::support::{drop_schema, url};

#[tokio::test]
async fn an_unmigrated_schema_is_refused_with_what_to_run() {
    let schema = unique_name("hopper_t");
    let err = PgBroker::connect_with(&url(), PgOptions::default().schema(&schema))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the hopper schema {schema} in {} is at version 0 but this build needs 17: run `hopper migrate --broker {}`",
            url(),
            url()
        )),
        "{err}"
    );
}

#[tokio::test]
async fn migrate_applies_once_even_when_run_concurrently() {
    let schema = unique_name("hopper_t");
    let options = PgOptions::default().schema(&schema);
    let url = url();
    let (a, b) = tokio::join!(
        hopper_postgres::migrate_with(&url, &options),
        hopper_postgres::migrate_with(&url, &options)
    );
    let mut applied = [a.unwrap(), b.unwrap()];
    applied.sort();
    assert_eq!(applied, [0, 17]);
    assert_eq!(
        hopper_postgres::migrate_with(&url, &options).await.unwrap(),
        0
    );
    let broker = PgBroker::connect_with(&url, options).await.unwrap();
    assert_eq!(broker.schema(), schema);
    broker.close().await;
    drop_schema(schema);
}

#[tokio::test]
async fn the_url_can_name_the_schema_and_passwords_stay_hidden() {
    let schema = unique_name("hopper_t");
    let with_schema = format!("{}?schema={schema}", url());
    assert_eq!(hopper_postgres::migrate(&with_schema).await.unwrap(), 17);
    let broker = PgBroker::connect(&with_schema).await.unwrap();
    assert_eq!(broker.schema(), schema);
    let debug = format!("{broker:?}");
    assert!(debug.contains("Connections"), "{debug}");
    broker.close().await;
    drop_schema(schema);

    let err = PgBroker::connect("postgres://postgres:s3cret@127.0.0.1:1/test")
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains("postgres://postgres:***@127.0.0.1:1/test"),
        "{shown}"
    );
    assert!(!err.to_string().contains("s3cret"));
    let err = PgBroker::connect_with(&url(), PgOptions::default().schema("Bad-Name"))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid schema `Bad-Name`: allowed: 1 to 63 of a-z 0-9 _, not starting with a digit"
    );
    let err = PgBroker::connect_with(&url(), PgOptions::default().vacuum_after(Some(0)))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid vacuum_after `0`: allowed: at least 1, or None"
    );
}

/// A vacuum that finds empty pages at the end of the jobs table must not give them back:
/// that takes a lock every claim would queue behind. Jobs fill some 2,000 pages and are
/// purged; a plain VACUUM, which follows the table's own setting as autovacuum does,
/// then leaves the table its size. Without the setting it shrank the table to nothing.
#[tokio::test]
async fn vacuum_leaves_the_empty_end_of_the_table_in_place() {
    use hopper_core::{Broker, NewJob};
    use sqlx::Connection;

    let options = super::support::schema().await;
    let schema = options.schema.clone();
    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let payload = "x".repeat(500);
    for _ in 0..10 {
        let jobs = (0..2_000)
            .map(|_| NewJob::json("q", &payload).unwrap())
            .collect();
        broker.enqueue(jobs).await.unwrap();
    }
    assert_eq!(broker.purge("q").await.unwrap(), 20_000);
    broker.close().await;
    let mut conn = sqlx::PgConnection::connect(&url()).await.unwrap();
    let size = format!("SELECT pg_relation_size('{schema}.hopper_jobs') / 8192");
    let pages = sqlx::query_scalar::<_, i64>(&size);
    let before = pages.fetch_one(&mut conn).await.unwrap();
    assert!(before > 1_000, "{before} pages");
    sqlx::raw_sql(&format!("VACUUM {schema}.hopper_jobs"))
        .execute(&mut conn)
        .await
        .unwrap();
    let after = sqlx::query_scalar::<_, i64>(&size)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(after, before, "the table was truncated");
    conn.close().await.unwrap();
    drop_schema(schema);
}

/// A broker error's first line carries the server's own message, not only what the broker
/// was doing: `{error}` alone in a log says why.
#[tokio::test]
async fn the_servers_message_is_in_the_first_line() {
    let missing = unique_name("no_such_db");
    let url = url().replace("/test", &format!("/{missing}"));
    let err = PgBroker::connect(&url).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("database \"{missing}\" does not exist")),
        "{err}"
    );
}

/// A schema at version 4, as the release before the operator calls left it, holding jobs
/// in every state, one dead letter without an end time (another program wrote it):
/// `migrate` adds the error history, the paused queues and the index of finished jobs in
/// listing order, and every job is still there to list, run, re-drive and discard.
#[tokio::test]
async fn a_schema_from_before_the_operator_calls_keeps_its_jobs() {
    use hopper_core::{Broker, FetchRequest, JobId, JobQuery, JobState, ListState, Outcome};
    use hopper_core::{Selection, Settlement};
    use sqlx::Connection;

    let options = super::support::schema_at(4).await;
    let name = options.schema.clone();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let jobs = format!(
        "INSERT INTO {name}.hopper_jobs (id, queue, state, run_at, attempt, max_attempts,
                                         payload, created_at, last_error, finished_at,
                                         lease_id, lease_expires)
         VALUES (1, 'q', 0, 0, 0, 5, 'pending', 0, NULL, NULL, NULL, NULL),
                (2, 'q', 1, 0, 1, 5, 'leased', 0, NULL, NULL, 7, 9e15),
                (3, 'q', 3, 0, 2, 2, 'dead', 0, 'boom', 5, NULL, NULL),
                (4, 'q', 3, 0, 1, 1, 'dead, no end', 0, 'bang', NULL, NULL, NULL)"
    );
    sqlx::raw_sql(&jobs).execute(&mut raw).await.unwrap();
    assert_eq!(
        hopper_postgres::migrate_with(&url(), &options)
            .await
            .unwrap(),
        13
    );
    let index: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = $2",
    )
    .bind(&name)
    .bind("hopper_jobs_finished")
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert!(index.contains("(queue, state, finished_at, id)"), "{index}");
    raw.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let listed = |state| {
        let broker = broker.clone();
        async move {
            let page = broker.list_jobs(&JobQuery::new("q", state, 10)).await;
            let page = page.unwrap();
            let ids: Vec<i64> = page.jobs.iter().map(|r| r.job.id.0).collect();
            (ids, page.jobs)
        }
    };
    let (dead, records) = listed(ListState::Dead).await;
    assert_eq!(dead, [3, 4], "the one without an end time last");
    assert!(
        records
            .iter()
            .all(|r| r.errors.is_empty() && r.finished_at.is_some())
    );
    assert_eq!(records[0].last_error.as_deref(), Some("boom"));
    assert_eq!(listed(ListState::Leased).await.0, [2]);
    assert_eq!(listed(ListState::Pending).await.0, [1]);

    let held = broker
        .fetch(FetchRequest::one(
            "q",
            10,
            std::time::Duration::from_secs(30),
        ))
        .await
        .unwrap();
    assert_eq!(held.jobs.len(), 1);
    let retry = Outcome::Retry {
        delay: std::time::Duration::ZERO,
        error: "first".into(),
        step_aside: false,
    };
    broker
        .settle(vec![Settlement {
            job: JobId(1),
            lease: held.lease,
            outcome: retry,
        }])
        .await
        .unwrap();
    let rec = broker.job(JobId(1)).await.unwrap().unwrap();
    let history: Vec<(u32, &str)> = rec
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(history, [(1, "first")]);

    let oldest = Selection::Queue {
        queue: "q".into(),
        at_most: 1,
    };
    assert_eq!(broker.retry_dead(&oldest).await.unwrap(), 1);
    let rec = broker.job(JobId(3)).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.job.attempt), (JobState::Pending, 0));
    let discard = Selection::Jobs(vec![JobId(4)]);
    assert_eq!(broker.discard_dead(&discard).await.unwrap(), 1);
    assert!(broker.set_paused("p", true).await.unwrap());
    assert_eq!(broker.queues().await.unwrap(), ["p", "q"]);
    broker.close().await;
    drop_schema(name);
}

/// A schema at version 5, as the release before live workers left it, holding a pending
/// job and a dead letter: `migrate` adds the tables of workers and throughput with their
/// indexes, the jobs stay, and reports are listed and counted at once.
#[tokio::test]
async fn a_schema_from_before_live_workers_keeps_its_jobs_and_lists_workers() {
    use std::time::Duration;

    use hopper_core::{Broker, QueueBeat, Throughput, WorkerBeat, WorkerInfo};
    use sqlx::Connection;

    let options = super::support::schema_at(5).await;
    let name = options.schema.clone();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let jobs = format!(
        "INSERT INTO {name}.hopper_jobs (id, queue, state, run_at, attempt, max_attempts,
                                         payload, created_at, last_error, finished_at)
         VALUES (1, 'q', 0, 0, 0, 5, 'pending', 0, NULL, NULL),
                (2, 'q', 3, 0, 1, 1, 'dead', 0, 'boom', 5)"
    );
    sqlx::raw_sql(&jobs).execute(&mut raw).await.unwrap();
    assert_eq!(
        hopper_postgres::migrate_with(&url(), &options)
            .await
            .unwrap(),
        12
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes
         WHERE schemaname = $1 AND tablename IN ('hopper_workers', 'hopper_throughput')
         ORDER BY indexname",
    )
    .bind(&name)
    .fetch_all(&mut raw)
    .await
    .unwrap();
    let has = |what: &str| indexes.iter().any(|i| i.contains(what));
    assert!(has("hopper_throughput USING btree (bucket)"), "{indexes:?}");
    assert!(
        has("hopper_throughput USING btree (queue, bucket)"),
        "{indexes:?}"
    );
    assert!(
        has("hopper_workers USING btree (expires_at)"),
        "{indexes:?}"
    );
    assert!(has("hopper_workers USING btree (id)"), "{indexes:?}");
    raw.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.dead), (1, 1), "{counts:?}");
    let queue = QueueBeat {
        queue: "q".into(),
        concurrency: 2,
        ..QueueBeat::default()
    };
    let settled = Throughput {
        completed: 3,
        failed: 1,
        dead: 0,
    };
    let beat = WorkerBeat {
        worker: WorkerInfo::this_process(0, vec![queue.clone()]),
        ttl: Duration::from_secs(30),
        settled: vec![("q".into(), settled)],
    };
    broker.heartbeat(&beat).await.unwrap();
    let listed = broker.workers().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (&listed[0].id, &listed[0].queues),
        (&beat.worker.id, &vec![queue])
    );
    let status = broker.queue_stats("q").await.unwrap();
    assert_eq!((status.counts.pending, status.counts.dead), (1, 1));
    assert_eq!(status.last_minute, Some(settled));
    assert_eq!(broker.throughput("q").await.unwrap().len(), 1);
    assert!(broker.deregister(&beat.worker.id).await.unwrap());
    broker.close().await;
    drop_schema(name);
}

/// A schema at version 6, as the release before unique keys left it, holding a pending
/// job (id 1) and a dead letter (2): `migrate` adds the table of keys and the function that decides
/// holds, the jobs stay, and a key already naming the pending job (as a producer of the
/// new release could have written it) is held by it, while one naming the dead letter is
/// taken.
#[tokio::test]
async fn a_schema_from_before_unique_keys_keeps_its_jobs_and_takes_keys() {
    use hopper_core::{Broker, Enqueued, JobId, NewJob};
    use sqlx::Connection;

    let options = super::support::schema_at(6).await;
    let name = options.schema.clone();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let jobs = format!(
        "INSERT INTO {name}.hopper_jobs (queue, state, run_at, attempt, max_attempts,
                                         payload, created_at, last_error, finished_at)
         VALUES ('q', 0, 0, 0, 5, 'pending', 0, NULL, NULL),
                ('q', 3, 0, 1, 1, 'dead', 0, 'boom', 5)"
    );
    sqlx::raw_sql(&jobs).execute(&mut raw).await.unwrap();
    assert_eq!(
        hopper_postgres::migrate_with(&url(), &options)
            .await
            .unwrap(),
        11
    );
    let index: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'hopper_unique'",
    )
    .bind(&name)
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert!(index.contains("UNIQUE INDEX hopper_unique_pkey"), "{index}");
    assert!(index.contains("(queue, key)"), "{index}");
    sqlx::raw_sql(&format!(
        "INSERT INTO {name}.hopper_unique (queue, key, job_id, scope)
         VALUES ('q', 'a', 1, 1), ('q', 'b', 2, 1)"
    ))
    .execute(&mut raw)
    .await
    .unwrap();
    raw.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.dead), (1, 1), "{counts:?}");
    let done = broker
        .enqueue_reported(vec![
            NewJob::new("q", b"a".to_vec()).unique_key("a"),
            NewJob::new("q", b"b".to_vec()).unique_key("b"),
        ])
        .await
        .unwrap();
    assert_eq!(done[0], Enqueued::existing(JobId(1)));
    assert!(!done[1].existing && done[1].id.0 > 2, "{done:?}");
    assert_eq!(broker.counts("q").await.unwrap().pending, 2);
    broker.close().await;
    drop_schema(name);
}

/// A schema at version 7, as the release before workers reported their schedules left it,
/// with a live worker's row: `migrate` adds the column of schedules, the worker is listed
/// as it reported, with none, and so is one an older build still running writes after the
/// migration without naming the column. A report of this build stores its schedules, and
/// a later one replaces them.
#[tokio::test]
async fn a_schema_from_before_worker_schedules_lists_its_workers_with_none() {
    use std::time::Duration;

    use hopper_core::{Broker, QueueBeat, ScheduleBeat, WorkerBeat, WorkerInfo};
    use sqlx::Connection;

    let options = super::support::schema_at(7).await;
    let name = options.schema.clone();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let old_worker = |id: &str, started_at: i64| {
        format!(
            "INSERT INTO {name}.hopper_workers (id, host, pid, started_at, heartbeat_at,
                                                expires_at, queues)
             VALUES ('{id}', 'old-host', 7, {started_at}, 0, 9e15,
                     '[{{\"queue\": \"q\", \"concurrency\": 3, \"held\": 0, \"running\": 0,
                        \"window\": 3, \"paused\": false}}]')"
        )
    };
    sqlx::raw_sql(&old_worker("old-host:7:a", 1))
        .execute(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        hopper_postgres::migrate_with(&url(), &options)
            .await
            .unwrap(),
        10
    );
    let column: (String, String, Option<String>) = sqlx::query_as(
        "SELECT data_type, is_nullable, column_default FROM information_schema.columns
         WHERE table_schema = $1 AND table_name = 'hopper_workers' AND column_name = 'schedules'",
    )
    .bind(&name)
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert_eq!(
        column,
        ("jsonb".into(), "NO".into(), Some("'[]'::jsonb".into()))
    );
    sqlx::raw_sql(&old_worker("old-host:7:b", 2))
        .execute(&mut raw)
        .await
        .unwrap();
    raw.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let queue = QueueBeat {
        queue: "q".into(),
        concurrency: 3,
        window: 3,
        ..QueueBeat::default()
    };
    let listed = broker.workers().await.unwrap();
    let seen: Vec<(&str, &Vec<QueueBeat>, usize)> = listed
        .iter()
        .map(|w| (w.id.as_str(), &w.queues, w.schedules.len()))
        .collect();
    let queues = vec![queue.clone()];
    assert_eq!(
        seen,
        [("old-host:7:a", &queues, 0), ("old-host:7:b", &queues, 0)]
    );

    let hourly = ScheduleBeat {
        name: "hourly".into(),
        queue: "q".into(),
        spec: "every 1h".into(),
        next_at: Some(3_600_000),
        last_at: None,
    };
    let mut beat = WorkerBeat {
        worker: WorkerInfo {
            schedules: vec![hourly.clone()],
            ..WorkerInfo::this_process(3, vec![queue])
        },
        ttl: Duration::from_secs(30),
        settled: vec![],
    };
    broker.heartbeat(&beat).await.unwrap();
    let listed = broker.workers().await.unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed[2].id, beat.worker.id);
    assert_eq!(listed[2].schedules, beat.worker.schedules);

    let reported = ScheduleBeat {
        last_at: Some(3_600_000),
        next_at: Some(7_200_000),
        ..hourly
    };
    beat.worker.schedules = vec![reported.clone()];
    broker.heartbeat(&beat).await.unwrap();
    assert_eq!(broker.workers().await.unwrap()[2].schedules, [reported]);
    beat.worker.schedules.clear();
    broker.heartbeat(&beat).await.unwrap();
    assert!(broker.workers().await.unwrap()[2].schedules.is_empty());
    broker.close().await;
    drop_schema(name);
}

/// A schema at version 8, as the release before records showed unique keys left it, with
/// a job stored then: `migrate` adds the column (nullable, no default: no row rewritten),
/// the old job reads as enqueued without a key, and a keyed job enqueued after shows its
/// key, while a plain one beside it shows none.
#[tokio::test]
async fn a_schema_from_before_record_keys_shows_keys_of_jobs_enqueued_after() {
    use hopper_core::{Broker, JobId, NewJob};
    use sqlx::Connection;

    let options = super::support::schema_at(8).await;
    let name = options.schema.clone();
    let mut raw = sqlx::PgConnection::connect(&url()).await.unwrap();
    let old = super::support::insert_old_job(&mut raw, &name).await;
    assert_eq!(
        hopper_postgres::migrate_with(&url(), &options)
            .await
            .unwrap(),
        9
    );
    let column: (String, String, Option<String>) = sqlx::query_as(
        "SELECT data_type, is_nullable, column_default FROM information_schema.columns
         WHERE table_schema = $1 AND table_name = 'hopper_jobs' AND column_name = 'unique_key'",
    )
    .bind(&name)
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert_eq!(column, ("text".into(), "YES".into(), None));
    raw.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    let old = broker.job(JobId(old)).await.unwrap().unwrap();
    assert_eq!(old.job.payload, b"old");
    assert_eq!(old.unique_key, None);
    let done = broker
        .enqueue_reported(vec![
            NewJob::new("q", b"keyed".to_vec()).unique_key("k"),
            NewJob::new("q", b"plain".to_vec()),
        ])
        .await
        .unwrap();
    assert!(done.iter().all(|d| !d.existing), "{done:?}");
    let keyed = broker.job(done[0].id).await.unwrap().unwrap();
    assert_eq!(keyed.unique_key.as_deref(), Some("k"));
    let plain = broker.job(done[1].id).await.unwrap().unwrap();
    assert_eq!(plain.unique_key, None);
    broker.close().await;
    drop_schema(name);
}
