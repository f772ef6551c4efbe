//! Worker reports on the database clock, and rows of the worker tables that expired or that
//! another program wrote: expired ones are listed no more and go with the next heartbeat,
//! and queues or schedules that cannot be read leave their worker listed without them.

use std::time::{Duration, SystemTime};

use hopper_core::job::to_millis;
use hopper_core::registry::{BUCKET, KEPT, bucket_of};
use hopper_core::{QueueBeat, ScheduleBeat, Throughput, WorkerBeat, WorkerInfo};
use sqlx::{Connection, MySqlConnection};

use super::support::broker_with;

fn settled(completed: u64) -> Throughput {
    Throughput {
        completed,
        failed: 1,
        dead: 0,
    }
}

async fn rows(conn: &mut MySqlConnection, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn reports_on_the_database_clock_and_rows_others_wrote() {
    let (broker, url) = broker_with(|o| o.wake_poll(None)).await;
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    let server_now = to_millis(SystemTime::now());
    let kept = KEPT.as_millis() as i64;
    let old = bucket_of(server_now) - kept - BUCKET.as_millis() as i64;
    sqlx::raw_sql(&format!(
        "INSERT INTO hopper_workers (id, host, pid, started_at, heartbeat_at, expires_at, queues,
                                     schedules)
         VALUES ('other:1:x', 'other', 1, 5, 5, {far}, '{{\"not\": \"a list\"}}',
                 '[{{\"name\": 7}}]'),
                ('gone:2:y', 'gone', 2, 6, 6, 7, '[]', '[]');
         INSERT INTO hopper_throughput (queue, bucket, completed, failed, dead)
         VALUES ('a', {old}, 1, 0, 0)",
        far = server_now + 600_000,
    ))
    .execute(&mut raw)
    .await
    .unwrap();

    let q = |name: &str| QueueBeat {
        queue: name.into(),
        concurrency: 1,
        ..QueueBeat::default()
    };
    let mut me = WorkerInfo::this_process(server_now, vec![q("a"), q("b"), q("c")]);
    me.schedules = vec![ScheduleBeat {
        name: "tidy".into(),
        queue: "a".into(),
        spec: "*/5 * * * * (UTC)".into(),
        next_at: Some(server_now + 300_000),
        last_at: Some(server_now),
    }];
    // Three queues settled, in no order: one statement of four rows, the last a padding.
    let beat = WorkerBeat {
        worker: me.clone(),
        ttl: Duration::from_secs(30),
        settled: vec![
            ("c".into(), settled(3)),
            ("a".into(), settled(1)),
            ("b".into(), settled(2)),
        ],
    };
    broker.heartbeat(&beat).await.unwrap();
    assert_eq!(
        rows(&mut raw, "hopper_workers").await,
        2,
        "the expired one went"
    );
    assert_eq!(
        rows(&mut raw, "hopper_throughput").await,
        3,
        "the old bucket went"
    );

    let listed = broker.workers().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["other:1:x", me.id.as_str()], "oldest first");
    assert!(listed[0].queues.is_empty(), "unreadable queues: {listed:?}");
    assert!(listed[0].schedules.is_empty(), "unreadable schedules");
    let mine = &listed[1];
    assert_eq!(
        (&mine.host, mine.pid, &mine.queues, &mine.schedules),
        (&me.host, me.pid, &me.queues, &me.schedules)
    );
    assert!(
        (mine.heartbeat_at - server_now).abs() < 60_000,
        "the database's clock: {} against {server_now}",
        mine.heartbeat_at
    );
    assert_eq!(mine.expires_at - mine.heartbeat_at, 30_000);

    for (queue, n) in [("a", 1), ("b", 2), ("c", 3)] {
        let buckets = broker.throughput(queue).await.unwrap();
        assert_eq!(buckets.len(), 1, "{queue}: {buckets:?}");
        assert_eq!(buckets[0].counts, settled(n), "{queue}");
        assert_eq!(buckets[0].at % 10_000, 0);
        let stats = broker.queue_stats(queue).await.unwrap();
        assert_eq!(stats.last_hour, Some(settled(n)), "{queue}");
    }
    // Again into the same bucket (unless it just turned): the counts add up.
    broker.heartbeat(&beat).await.unwrap();
    let a = broker.throughput("a").await.unwrap();
    let total: u64 = a.iter().map(|b| b.counts.completed).sum();
    assert_eq!(total, 2, "{a:?}");

    let mut bad = beat.clone();
    bad.settled.push(("no spaces".into(), settled(9)));
    let err = broker.heartbeat(&bad).await.unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert!(
        broker
            .throughput("no spaces")
            .await
            .unwrap_err()
            .is_config()
    );

    assert!(broker.deregister("other:1:x").await.unwrap());
    assert!(!broker.deregister("other:1:x").await.unwrap());
    assert_eq!(broker.workers().await.unwrap().len(), 1);
    let _ = raw.close().await;
}
