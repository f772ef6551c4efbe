//! Ordering keys, kept by the broker ([`hopper_core::job::ordering`]): one job of a key at
//! a time, in enqueue order, whatever becomes of each.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Broker, JobId, JobState, NewJob, Outcome, Selection};
use tokio::time::advance;

use super::{capable_or_refuses, counts, counts_of, one, record, settle};
use crate::helpers::{TTL, enqueue, fetch, ids};

fn keyed(queue: &str, key: &str, name: &str) -> NewJob {
    NewJob::new(queue, name.as_bytes().to_vec()).ordering_key(key)
}

/// Says whether the broker keeps ordering keys; when it does not, checks that it refuses
/// them and stores nothing.
async fn keeps_order(broker: &Arc<dyn Broker>, case: &str) -> bool {
    let has = broker.capabilities().ordered;
    capable_or_refuses(broker, has, "ordered", keyed("q", "k", "k"), case).await
}

/// Fetches one job of `queue`, checks it is `expected`, and settles it with `outcome`.
async fn run_one(broker: &Arc<dyn Broker>, queue: &str, expected: JobId, outcome: Outcome) {
    let held = fetch(broker, queue, 10, TTL).await;
    assert_eq!(ids(&held.jobs), vec![expected], "the only job claimable");
    settle(broker, one(expected, held.lease, outcome)).await;
}

/// Jobs of a key run one at a time in enqueue order: a claim takes at most one per key, a
/// retried, snoozed or expired job keeps the next waiting, and the next is unblocked once
/// the one before completes, dies, is cancelled or purged. Other keys, other queues and
/// plain jobs are not held up.
pub async fn ordered_keys(broker: Arc<dyn Broker>) {
    if !keeps_order(&broker, "ordered_keys").await {
        return;
    }
    let made = enqueue(
        &broker,
        vec![
            keyed("q", "a", "a1"),
            keyed("q", "a", "a2"),
            keyed("q", "b", "b1"),
            NewJob::new("q", b"p".to_vec()),
            keyed("q", "a", "a3"),
            keyed("other", "a", "o1"),
        ],
    )
    .await;
    let [a1, a2, b1, p, a3, o1] = made[..] else {
        unreachable!()
    };
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(3, 2, 0, 0),
        "a2 and a3 wait"
    );
    let rec = record(&broker, a2).await;
    assert_eq!(
        (rec.state, rec.ordering_key.as_deref(), rec.blocked),
        (JobState::Pending, Some("a"), true),
        "a blocked job's record"
    );
    assert_eq!(
        rec.job.run_at,
        record(&broker, a1).await.job.run_at,
        "its own time"
    );
    assert!(!record(&broker, a1).await.blocked);
    assert_eq!(record(&broker, p).await.ordering_key, None);

    // One per key per claim, and nothing more while the heads are out.
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), vec![a1, b1, p], "a claim takes the heads");
    assert_eq!(ids(&fetch(&broker, "other", 10, TTL).await.jobs), vec![o1]);
    let rest = fetch(&broker, "q", 10, TTL).await;
    assert!(
        rest.jobs.is_empty(),
        "a2 waits for a1: {:?}",
        ids(&rest.jobs)
    );
    assert_eq!(rest.next_due, None, "a blocked job is not due at any time");

    // A retry keeps the key: a2 waits through a1's backoff.
    let retry = Outcome::Retry {
        delay: Duration::from_secs(10),
        error: "later".into(),
        step_aside: false,
    };
    settle(&broker, one(a1, held.lease, retry)).await;
    settle(&broker, one(b1, held.lease, Outcome::Ack)).await;
    settle(&broker, one(p, held.lease, Outcome::Ack)).await;
    let during = fetch(&broker, "q", 10, TTL).await;
    assert!(during.jobs.is_empty(), "a2 waits for a1's retry");
    advance(Duration::from_secs(10)).await;
    let again = fetch(&broker, "q", 10, TTL).await;
    assert_eq!((ids(&again.jobs), again.jobs[0].attempt), (vec![a1], 2));
    settle(&broker, one(a1, again.lease, Outcome::Ack)).await;
    assert!(!record(&broker, a2).await.blocked, "a2 is the head now");

    // A snooze keeps it too; a dead letter moves the key on.
    let snooze = Outcome::Snooze {
        delay: Duration::from_secs(5),
    };
    run_one(&broker, "q", a2, snooze).await;
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "a3 waits for a2's snooze"
    );
    advance(Duration::from_secs(5)).await;
    let died = Outcome::DeadLetter { error: "no".into() };
    run_one(&broker, "q", a2, died).await;

    // A cancelled job is skipped, whether waiting or at the head.
    let later = enqueue(&broker, vec![keyed("q", "a", "a4"), keyed("q", "a", "a5")]).await;
    broker.cancel(later[0]).await.unwrap();
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), vec![a3]);
    // a2 re-driven from the dead letters waits for a3, then runs before a5.
    assert_eq!(
        broker.retry_dead(&Selection::Jobs(vec![a2])).await.unwrap(),
        1
    );
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "a2 waits for a3"
    );
    settle(&broker, one(a3, held.lease, Outcome::Ack)).await;
    run_one(&broker, "q", a2, Outcome::Ack).await;
    run_one(&broker, "q", later[1], Outcome::Ack).await;
    let c = enqueue(&broker, vec![keyed("q", "c", "c1"), keyed("q", "c", "c2")]).await;
    broker.cancel(c[0]).await.unwrap();
    run_one(&broker, "q", c[1], Outcome::Ack).await;

    // An expired lease keeps the key; an expiry on the last attempt moves it on.
    let d = enqueue(
        &broker,
        vec![keyed("q", "d", "d1").max_attempts(2), keyed("q", "d", "d2")],
    )
    .await;
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), vec![d[0]]);
    advance(TTL + Duration::from_secs(1)).await;
    let back = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&back.jobs),
        vec![d[0]],
        "the expired head again, not d2"
    );
    advance(TTL + Duration::from_secs(1)).await;
    let mut next = ids(&fetch(&broker, "q", 10, TTL).await.jobs);
    if next.is_empty() {
        // A broker may unblock after the claim that reaped the head.
        next = ids(&fetch(&broker, "q", 10, TTL).await.jobs);
    }
    assert_eq!(next, vec![d[1]], "d2 once d1 died of its expired lease");
    assert_eq!(record(&broker, d[0]).await.state, JobState::Dead);

    // A job given a time before 1970 waits and runs like any other.
    let before_1970 = std::time::SystemTime::UNIX_EPOCH - Duration::from_secs(86_400);
    let f = enqueue(
        &broker,
        vec![
            keyed("q", "f", "f1"),
            keyed("q", "f", "f2").run_at(before_1970),
        ],
    )
    .await;
    let rec = record(&broker, f[1]).await;
    assert_eq!(
        (rec.blocked, rec.job.run_at),
        (true, -86_400_000),
        "f2 waits, its time kept"
    );
    run_one(&broker, "q", f[0], Outcome::Ack).await;
    run_one(&broker, "q", f[1], Outcome::Ack).await;

    // A purge leaves no key behind.
    enqueue(&broker, vec![keyed("r", "e", "e1"), keyed("r", "e", "e2")]).await;
    assert_eq!(broker.purge("r").await.unwrap(), 2);
    let e3 = enqueue(&broker, vec![keyed("r", "e", "e3")]).await[0];
    assert_eq!(ids(&fetch(&broker, "r", 10, TTL).await.jobs), vec![e3]);
}

/// 4 producers enqueue 200 jobs each over the same 10 keys while 4 claimers fetch and
/// acknowledge: every job runs once, never two of a key at a time, and each key's jobs in
/// the order their producer enqueued them.
pub async fn ordered_keys_racing_claimers(broker: Arc<dyn Broker>) {
    if !keeps_order(&broker, "ordered_keys_racing_claimers").await {
        return;
    }
    const PRODUCERS: u8 = 4;
    const PER_PRODUCER: u32 = 200;
    const KEYS: u32 = 10;
    let mut producers = Vec::new();
    for producer in 0..PRODUCERS {
        let broker = broker.clone();
        producers.push(tokio::spawn(async move {
            for chunk in (0..PER_PRODUCER).collect::<Vec<_>>().chunks(5) {
                let jobs = chunk
                    .iter()
                    .map(|&n| {
                        let name = format!("{producer}:{n}");
                        keyed("race", &format!("k{}", n % KEYS), &name)
                    })
                    .collect();
                broker.enqueue(jobs).await.unwrap();
            }
        }));
    }
    let in_flight = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let ran = Arc::new(Mutex::new(Vec::<(String, u8, u32)>::new()));
    let total = u32::from(PRODUCERS) * PER_PRODUCER;
    let mut claimers = Vec::new();
    for _ in 0..4 {
        let (broker, in_flight, ran) = (broker.clone(), in_flight.clone(), ran.clone());
        claimers.push(tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while (ran.lock().unwrap().len() as u32) < total {
                assert!(tokio::time::Instant::now() < deadline, "jobs left unrun");
                let held = fetch(&broker, "race", 8, TTL).await;
                if held.jobs.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                let mut keys = Vec::new();
                for job in &held.jobs {
                    let name = String::from_utf8(job.payload.clone()).unwrap();
                    let (producer, n) = name.split_once(':').unwrap();
                    let n: u32 = n.parse().unwrap();
                    let key = format!("k{}", n % KEYS);
                    assert!(
                        in_flight.lock().unwrap().insert(key.clone()),
                        "two jobs of {key} at once"
                    );
                    ran.lock()
                        .unwrap()
                        .push((key.clone(), producer.parse().unwrap(), n));
                    keys.push(key);
                }
                tokio::task::yield_now().await;
                // Out of flight before the acknowledgement: the next job of a key cannot
                // be claimed before it lands.
                for key in keys {
                    in_flight.lock().unwrap().remove(&key);
                }
                let acks = crate::helpers::settle_all(&held, &Outcome::Ack);
                let report = broker.settle(acks).await.unwrap();
                assert!(report.fenced.is_empty());
            }
        }));
    }
    for task in producers.into_iter().chain(claimers) {
        task.await.unwrap();
    }
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.len() as u32, total, "every job once");
    let mut by_producer = BTreeMap::<(String, u8), Vec<u32>>::new();
    for (key, producer, n) in ran {
        by_producer.entry((key, producer)).or_default().push(n);
    }
    for ((key, producer), ns) in by_producer {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "{key}: producer {producer}'s jobs out of order: {ns:?}"
        );
    }
}
