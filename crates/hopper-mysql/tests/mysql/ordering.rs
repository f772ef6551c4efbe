//! Ordering keys on the real server: keys compare byte for byte, a job waiting behind its
//! key is listed where its stored time puts it and pages past it, dead letters re-driven a
//! queue at a time wait their turn, an ack and an enqueue of one key racing from two
//! brokers never leave a job behind (nor an ack and a cancel of the next job), nor does a
//! retry stepping aside racing an enqueue leave two jobs of a key to run, heartbeats delete
//! the rows of idle keys a window at a time, and what each call asks of the server (plain
//! jobs' calls as before). The schema and query plans are in `ordering_schema`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::job::MAX_RUN_AT;
use hopper_core::{
    Broker, Clock, FetchRequest, JobQuery, ListState, NewJob, Outcome, QueueBeat, Selection,
    Settlement, WorkerBeat, WorkerInfo,
};
use hopper_mysql::{MySqlBroker, MySqlOptions};
use hopper_testkit::helpers::{enqueue, fetch, ids};
use sqlx::{Connection, MySqlConnection};

use super::support::{CountedUser, TempDatabase, broker_with};

const TTL: Duration = Duration::from_secs(30);

fn keyed(queue: &str, key: &str, name: &str) -> NewJob {
    NewJob::new(queue, name.as_bytes().to_vec()).ordering_key(key)
}

fn acks(held: &hopper_core::Fetched) -> Vec<Settlement> {
    held.jobs.iter().map(Settlement::ack).collect()
}

/// Keys are bytes: case and trailing spaces make other keys, each with a job of its own
/// running, and a key of 255 bytes is kept whole.
#[tokio::test]
async fn keys_compare_byte_for_byte() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let long = "é".repeat(127) + "x";
    let keys = ["k", "k ", "K", "ké", "ke", long.as_str()];
    let first = enqueue(&broker, keys.iter().map(|k| keyed("q", k, k)).collect()).await;
    let second = enqueue(&broker, keys.iter().map(|k| keyed("q", k, k)).collect()).await;
    let held = fetch(&broker, "q", 20, TTL).await;
    assert_eq!(
        ids(&held.jobs),
        first,
        "one job of each key, none of the second batch"
    );
    for (id, key) in second.iter().zip(keys) {
        let rec = broker.job(*id).await.unwrap().unwrap();
        assert_eq!(
            (rec.ordering_key.as_deref(), rec.blocked),
            (Some(key), true)
        );
    }
    broker.settle(acks(&held)).await.unwrap();
    let held = fetch(&broker, "q", 20, TTL).await;
    assert_eq!(ids(&held.jobs), second);
}

/// Waiting jobs are listed as scheduled, after every job with a time of its own: each shows
/// its own time, and a listing a job at a time walks past them by their stored time, each
/// once, in both directions.
#[tokio::test(start_paused = true)]
async fn waiting_jobs_are_listed_and_paged_by_their_stored_time() {
    let (broker, _) = broker_with(|o| o.clock(Clock::tokio()).wake_poll(None)).await;
    let mut made = enqueue(
        &broker,
        vec![
            keyed("q", "a", "a1"),
            keyed("q", "a", "a2").delay(Duration::from_secs(5)),
            keyed("q", "a", "a3"),
            keyed("q", "b", "b1").delay(Duration::from_secs(60)),
            keyed("q", "b", "b2"),
        ],
    )
    .await;
    made.extend(
        enqueue(
            &broker,
            vec![NewJob::new("q", "later").delay(Duration::from_secs(9))],
        )
        .await,
    );
    // `later` and b1 by their times; then a3 and b2, waiting since now, and a2, waiting
    // with a delay of its own.
    let scheduled = [made[5], made[3], made[2], made[4], made[1]];
    for newest_first in [false, true] {
        let mut listed = Vec::new();
        let mut query = JobQuery {
            newest_first,
            ..JobQuery::new("q", ListState::Scheduled, 1)
        };
        loop {
            let page = broker.list_jobs(&query).await.unwrap();
            for rec in &page.jobs {
                let (delay, waits) = match rec.job.payload.as_slice() {
                    b"a2" => (5_000, true),
                    b"b1" => (60_000, false),
                    b"later" => (9_000, false),
                    _ => (0, true),
                };
                let own = rec.job.created_at + delay;
                assert_eq!((rec.job.run_at, rec.blocked), (own, waits), "{rec:?}");
                listed.push(rec.job.id);
            }
            match page.next {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
        let mut expected = scheduled.to_vec();
        if newest_first {
            expected.reverse();
        }
        assert_eq!(listed, expected, "newest first: {newest_first}");
    }
    let pending = broker
        .list_jobs(&JobQuery::new("q", ListState::Pending, 10))
        .await
        .unwrap();
    assert_eq!(
        pending.jobs.iter().map(|r| r.job.id).collect::<Vec<_>>(),
        [made[0]]
    );
}

/// Dead letters re-driven a queue at a time go back as a re-drive by id does: those with a
/// key wait behind the key's running job and run right after it, oldest first; those
/// without one are due at once.
#[tokio::test]
async fn dead_letters_of_a_queue_go_back_behind_their_keys() {
    let (broker, _) = broker_with(|o| o.wake_poll(None)).await;
    let made = enqueue(
        &broker,
        vec![
            keyed("q", "k", "k1").max_attempts(1),
            NewJob::new("q", "p").max_attempts(1),
        ],
    )
    .await;
    let held = fetch(&broker, "q", 10, TTL).await;
    let die = held
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: held.lease,
            outcome: Outcome::DeadLetter { error: "no".into() },
        })
        .collect();
    broker.settle(die).await.unwrap();
    let k2 = enqueue(&broker, vec![keyed("q", "k", "k2"), keyed("q", "k", "k3")]).await;
    let running = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(ids(&running.jobs), [k2[0]]);
    let all = Selection::Queue {
        queue: "q".into(),
        at_most: 10,
    };
    assert_eq!(broker.retry_dead(&all).await.unwrap(), 2);
    let rec = broker.job(made[0]).await.unwrap().unwrap();
    assert!(rec.blocked, "k1 waits behind k2: {rec:?}");
    let plain = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(ids(&plain.jobs), [made[1]], "p at once, k1 behind k2");
    broker.settle(acks(&running)).await.unwrap();
    for expected in [made[0], k2[1]] {
        let next = fetch(&broker, "q", 10, TTL).await;
        assert_eq!(ids(&next.jobs), [expected]);
        broker.settle(acks(&next)).await.unwrap();
    }
    assert_eq!(broker.counts("q").await.unwrap().pending, 0);
}

/// Two brokers on one database, as two processes: one acknowledges each key's running job
/// while the other enqueues the key's next job, 200 times over 4 keys at once. However the
/// two interleave, the new job is never left waiting behind a job that ended: right after
/// both calls return, each key has exactly one job to claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_and_an_enqueue_racing_on_a_key_leave_nothing_behind() {
    let (producer, url) = broker_with(|o| o.wake_poll(None)).await;
    let worker: Arc<dyn Broker> = Arc::new(
        MySqlBroker::connect_with(&url, MySqlOptions::default().wake_poll(None))
            .await
            .unwrap(),
    );
    let keys = ["a", "b", "c", "d"];
    enqueue(&producer, keys.iter().map(|k| keyed("q", k, k)).collect()).await;
    let mut held = fetch(&worker, "q", 10, TTL).await;
    assert_eq!(held.jobs.len(), 4);
    for round in 0..200 {
        let ack = worker.settle(acks(&held));
        let next = producer.enqueue(keys.iter().map(|k| keyed("q", k, k)).collect());
        let (acked, stored) = tokio::join!(ack, next);
        assert_eq!(acked.unwrap().applied, 4, "round {round}");
        stored.unwrap();
        held = fetch(&worker, "q", 10, TTL).await;
        let found: BTreeSet<&[u8]> = held.jobs.iter().map(|j| j.payload.as_slice()).collect();
        assert_eq!(
            found.len(),
            4,
            "round {round}: one job of each key, got {held:?}"
        );
    }
    let counts = worker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.scheduled, counts.leased), (0, 0, 4));
}

/// Two brokers again: one acknowledges a key's running job while the other cancels the job
/// waiting next, 100 times. A cancel locks the waiting job's row only, so the ack may pick
/// that job to run and find it gone; it then lets the one after it run. Right after both
/// calls return, the key has exactly one job to claim: the one after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_and_a_cancel_of_the_next_job_racing_leave_nothing_behind() {
    let (producer, url) = broker_with(|o| o.wake_poll(None)).await;
    let worker: Arc<dyn Broker> = Arc::new(
        MySqlBroker::connect_with(&url, MySqlOptions::default().wake_poll(None))
            .await
            .unwrap(),
    );
    let first = enqueue(&producer, vec![keyed("q", "k", "k")]).await;
    let mut held = fetch(&worker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), first);
    for round in 0..100 {
        let waiting = enqueue(
            &producer,
            vec![keyed("q", "k", "n1"), keyed("q", "k", "n2")],
        )
        .await;
        let ack = worker.settle(acks(&held));
        let cancel = producer.cancel(waiting[0]);
        let (acked, cancelled) = tokio::join!(ack, cancel);
        assert_eq!(acked.unwrap().applied, 1, "round {round}");
        cancelled.unwrap();
        held = fetch(&worker, "q", 10, TTL).await;
        let expected = match producer.job(waiting[0]).await.unwrap().unwrap().state {
            hopper_core::JobState::Cancelled => waiting[1],
            // The ack let n1 run before the cancel reached it: n1 is held, n2 waits.
            _ => waiting[0],
        };
        assert_eq!(ids(&held.jobs), [expected], "round {round}");
        if expected == waiting[0] {
            // Cancel n2 too: the round ends with the key's next job held, as it began.
            producer.cancel(waiting[1]).await.unwrap();
        }
    }
}

/// How many jobs of `queue`'s `key` can run: unfinished and not moved behind their key.
async fn runnable(conn: &mut MySqlConnection, queue: &str, key: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM hopper_jobs
         WHERE queue = ? AND ordering_key = ? AND finished_at IS NULL AND state IN (0, 1)
           AND run_at <= ?",
    )
    .bind(queue)
    .bind(key.as_bytes())
    .bind(MAX_RUN_AT)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Two brokers on one database: one settles a key's running job a1 with a retry that
/// steps aside while the other enqueues two more jobs of the key, 30 keys in turn. The
/// settlement moves a1 behind its key and lets a2 run under the key's lock, and the
/// enqueue stores its jobs waiting under the same lock, whichever goes first: each key has
/// exactly one job that can run, a2, and a1 waits. A job alone on its key when it steps
/// aside keeps the key; racing the enqueue of the key's next job, either it kept the key
/// and the new job waits, or it found the new job there and let it run: one job can run
/// either way.
#[tokio::test(start_paused = true)]
async fn a_retry_stepping_aside_and_an_enqueue_racing_leave_one_job_to_run() {
    let options = || {
        MySqlOptions::default()
            .clock(Clock::tokio())
            .wake_poll(None)
    };
    let (producer, url) = broker_with(|_| options()).await;
    let worker: Arc<dyn Broker> =
        Arc::new(MySqlBroker::connect_with(&url, options()).await.unwrap());
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    // Held past any jump of the paused clock; a1 and b1 are due long after the checks.
    let held_for = Duration::from_secs(3600);
    let aside = |job, lease| Settlement {
        job,
        lease,
        outcome: Outcome::Retry {
            delay: Duration::from_secs(600),
            error: "later".into(),
            step_aside: true,
        },
    };
    let (mut kept, mut gave_up) = (0, 0);
    for round in 0..30 {
        let key = format!("k{round}");
        let a: Vec<NewJob> = (1..=4)
            .map(|i| keyed("q", &key, &format!("a{i}")))
            .collect();
        let a = enqueue(&producer, a).await;
        let held = fetch(&worker, "q", 10, held_for).await;
        assert_eq!(ids(&held.jobs), [a[0]], "round {round}");
        let more = vec![keyed("q", &key, "a5"), keyed("q", &key, "a6")];
        let (settled, stored) = tokio::join!(
            worker.settle(vec![aside(a[0], held.lease)]),
            producer.enqueue(more)
        );
        assert_eq!(settled.unwrap().applied, 1, "round {round}");
        assert_eq!(stored.unwrap().len(), 2, "round {round}");
        assert_eq!(runnable(&mut raw, "q", &key).await, 1, "round {round}");
        let next = fetch(&worker, "q", 10, held_for).await;
        assert_eq!(ids(&next.jobs), [a[1]], "round {round}: a2 runs");
        let a1 = worker.job(a[0]).await.unwrap().unwrap();
        assert_eq!((a1.blocked, a1.job.attempt), (true, 1), "round {round}");

        // Alone on its key: b1.
        let key = format!("l{round}");
        let b1 = enqueue(&producer, vec![keyed("r", &key, "b1")]).await[0];
        let held = fetch(&worker, "r", 10, held_for).await;
        assert_eq!(ids(&held.jobs), [b1], "round {round}");
        let (settled, stored) = tokio::join!(
            worker.settle(vec![aside(b1, held.lease)]),
            producer.enqueue(vec![keyed("r", &key, "b2")])
        );
        assert_eq!(settled.unwrap().applied, 1, "round {round}");
        let b2 = stored.unwrap()[0];
        assert_eq!(runnable(&mut raw, "r", &key).await, 1, "round {round}");
        let next = fetch(&worker, "r", 10, held_for).await;
        match worker.job(b1).await.unwrap().unwrap().blocked {
            true => {
                gave_up += 1;
                assert_eq!(ids(&next.jobs), [b2], "round {round}: b2 runs");
            }
            false => {
                kept += 1;
                assert!(next.jobs.is_empty(), "round {round}: b1 kept its key");
                assert!(worker.job(b2).await.unwrap().unwrap().blocked);
            }
        }
    }
    println!("b1 kept its key {kept} times, let b2 run {gave_up} times");
    let _ = raw.close().await;
}

async fn key_rows(conn: &mut MySqlConnection) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM hopper_ordering")
        .fetch_one(conn)
        .await
        .unwrap()
}

/// Heartbeats delete the rows of keys without unfinished jobs, at most once a minute and a
/// bounded walk at a time: 10,500 rows of keys long idle take two prunes, a minute apart.
/// The row of a key with jobs running and waiting stays, and a key whose row went is taken
/// again by its next enqueue.
#[tokio::test(start_paused = true)]
async fn heartbeats_delete_the_rows_of_idle_keys_a_window_at_a_time() {
    let (broker, url) = broker_with(|o| o.clock(Clock::tokio()).wake_poll(None)).await;
    let mut raw = MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "SET SESSION max_recursive_iterations = 100000;
         INSERT INTO hopper_ordering (queue, `key`)
         WITH RECURSIVE n (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 10499)
         SELECT 'old', CONCAT('k', LPAD(i, 5, '0')) FROM n",
    )
    .execute(&mut raw)
    .await
    .unwrap();
    let done = enqueue(&broker, vec![keyed("q", "done", "d")]).await;
    enqueue(
        &broker,
        vec![keyed("q", "busy", "b1"), keyed("q", "busy", "b2")],
    )
    .await;
    // Held past the prunes a minute apart.
    let held = fetch(&broker, "q", 10, Duration::from_secs(3600)).await;
    assert_eq!(held.jobs.len(), 2, "d and b1");
    let ack = Settlement {
        job: done[0],
        lease: held.lease,
        outcome: Outcome::Ack,
    };
    broker.settle(vec![ack]).await.unwrap();
    assert_eq!(key_rows(&mut raw).await, 10_502);

    let beat = WorkerBeat {
        worker: WorkerInfo::this_process(
            0,
            vec![QueueBeat {
                queue: "q".into(),
                concurrency: 1,
                ..QueueBeat::default()
            }],
        ),
        ttl: TTL,
        settled: Vec::new(),
    };
    broker.heartbeat(&beat).await.unwrap();
    assert_eq!(key_rows(&mut raw).await, 502, "ten windows");
    broker.heartbeat(&beat).await.unwrap();
    assert_eq!(key_rows(&mut raw).await, 502, "once a minute");
    tokio::time::advance(Duration::from_secs(60)).await;
    broker.heartbeat(&beat).await.unwrap();
    let left: Vec<Vec<u8>> = sqlx::query_scalar("SELECT `key` FROM hopper_ordering")
        .fetch_all(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        left,
        [b"busy".to_vec()],
        "the key with jobs running and waiting"
    );

    let again = enqueue(&broker, vec![keyed("q", "done", "d2")]).await;
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), again, "b2 still waits, `done` runs");
    assert_eq!(key_rows(&mut raw).await, 2);
    let _ = raw.close().await;
}

/// The statements of each call, as the server counts them (the transaction's `BEGIN` and
/// `COMMIT` included): plain jobs' enqueue and acknowledgement are what they were (and one
/// ack reads one row); a keyed enqueue locks its keys' rows and reads their heads before
/// its insert; an ack of a job with a key reads its key under the lock it takes, then locks
/// the key's row, reads the key's next job, and unblocks it; a retry stepping aside also
/// reads the database clock once, and moves its job behind the key before that read.
#[tokio::test]
async fn what_each_call_asks_of_the_server() {
    let db = TempDatabase::migrated().await;
    let user = CountedUser::create(&db).await;
    let options = MySqlOptions::default().wake_poll(None).connections(1);
    let broker: Arc<dyn Broker> =
        Arc::new(MySqlBroker::connect_with(&user.url, options).await.unwrap());
    let counted = |before: i64| {
        let user = &user;
        async move {
            // MariaDB counts a statement after its reply (see `idle`).
            std::thread::sleep(Duration::from_millis(20));
            user.statements().await - before
        }
    };
    let plain: Vec<NewJob> = (0..4).map(|i| NewJob::json("q", &i).unwrap()).collect();
    let before = user.statements().await;
    broker.enqueue(plain).await.unwrap();
    assert_eq!(counted(before).await, 1, "a plain enqueue: its INSERT");
    let held = broker.fetch(FetchRequest::one("q", 4, TTL)).await.unwrap();
    let before = user.statements().await;
    broker.settle(acks(&held)).await.unwrap();
    assert_eq!(
        counted(before).await,
        3,
        "a plain ack: BEGIN, DELETE, COMMIT"
    );
    // One ack reads its own row, however many others are leased: with a list of one pair,
    // which the DELETE is padded past, MariaDB would walk every leased job, locking them.
    let many: Vec<NewJob> = (0..300).map(|i| NewJob::json("r", &i).unwrap()).collect();
    broker.enqueue(many).await.unwrap();
    let _others = broker
        .fetch(FetchRequest::one("r", 200, TTL))
        .await
        .unwrap();
    let one = broker.fetch(FetchRequest::one("r", 1, TTL)).await.unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let read = user.rows_read().await;
    broker.settle(acks(&one)).await.unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let ack_read = user.rows_read().await - read;
    assert!(ack_read < 10, "one ack read {ack_read} rows");

    let before = user.statements().await;
    enqueue(&broker, vec![keyed("q", "k", "k1"), keyed("q", "k", "k2")]).await;
    assert_eq!(
        counted(before).await,
        5,
        "BEGIN, lock the key, read its head, INSERT, COMMIT"
    );
    let held = broker.fetch(FetchRequest::one("q", 4, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 1);
    let before = user.statements().await;
    broker.settle(acks(&held)).await.unwrap();
    assert_eq!(
        counted(before).await,
        7,
        "BEGIN, lock and read, DELETE, lock the key, read its next job, unblock it, COMMIT"
    );
    let next = broker.fetch(FetchRequest::one("q", 4, TTL)).await.unwrap();
    assert_eq!(next.jobs.len(), 1);
    let before = user.statements().await;
    broker.settle(acks(&next)).await.unwrap();
    assert_eq!(
        counted(before).await,
        6,
        "BEGIN, lock and read, DELETE, lock the key, read its next job (none), COMMIT"
    );

    enqueue(&broker, vec![keyed("q", "s", "s1"), keyed("q", "s", "s2")]).await;
    let held = broker.fetch(FetchRequest::one("q", 4, TTL)).await.unwrap();
    assert_eq!(held.jobs.len(), 1);
    let aside = Settlement {
        job: held.jobs[0].id,
        lease: held.lease,
        outcome: Outcome::Retry {
            delay: Duration::from_secs(60),
            error: "later".into(),
            step_aside: true,
        },
    };
    let before = user.statements().await;
    broker.settle(vec![aside]).await.unwrap();
    assert_eq!(
        counted(before).await,
        10,
        "BEGIN, lock and read, the clock, UPDATE, lock the key, find another job, move the \
         job behind, read the next job, unblock it, COMMIT"
    );
    let next = broker.fetch(FetchRequest::one("q", 4, TTL)).await.unwrap();
    assert_eq!(next.jobs[0].payload, b"s2");
}
