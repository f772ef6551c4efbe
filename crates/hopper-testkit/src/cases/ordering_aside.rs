//! Ordering keys whose failed jobs step aside for their retry
//! ([`Outcome::Retry::step_aside`](hopper_core::Outcome::Retry), set by
//! `QueueOptions::retries_hold_key(false)`): the key's next jobs run meanwhile, one at a
//! time, and the failed job runs again once its time has come and the running one ended.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Clock, JobId, LeaseId, NewJob, Outcome, Selection, Settlement};
use tokio::time::advance;

use super::{one, record, settle};
use crate::helpers::{TTL, enqueue, fetch, ids};

fn keyed(key: &str, name: &str) -> NewJob {
    NewJob::new("q", name.as_bytes().to_vec()).ordering_key(key)
}

fn aside(secs: u64) -> Outcome {
    Outcome::Retry {
        delay: Duration::from_secs(secs),
        error: "later".into(),
        step_aside: true,
    }
}

/// Fetches `q`, checks it gives exactly `expected`, and returns the lease.
async fn claims(broker: &Arc<dyn Broker>, expected: &[JobId], why: &str) -> LeaseId {
    let held = fetch(broker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), expected, "{why}");
    held.lease
}

/// Whether a job waits blocked, and its own time less `t0`, in seconds.
async fn waits(broker: &Arc<dyn Broker>, id: JobId, t0: i64) -> (bool, i64) {
    let rec = record(broker, id).await;
    (rec.blocked, (rec.job.run_at - t0 + 500).div_euclid(1000))
}

/// A failed job that steps aside lets the jobs behind it run, one at a time, and runs
/// again before those still waiting once its time has come; it keeps its key when none
/// wait, and when every job left stepped aside the one due first goes next. A retry that
/// does not step aside still holds the key, and a job without a key ignores the flag. A
/// step aside for no time, one settled beside an end of another key's job, and a dead
/// letter re-driven into a key with a stepped-aside job each keep one job of a key at a
/// time.
pub async fn ordered_retries_step_aside(broker: Arc<dyn Broker>) {
    if !broker.capabilities().ordered {
        // Refusing ordering keys is checked by `ordered_keys`.
        return;
    }
    let t0 = Clock::tokio().now_millis();
    let a = enqueue(
        &broker,
        vec![
            keyed("a", "a1"),
            keyed("a", "a2"),
            keyed("a", "a3"),
            keyed("a", "a4"),
            NewJob::new("q", b"p".to_vec()),
        ],
    )
    .await;
    let p = a[4];
    let lease = claims(&broker, &[a[0], p], "the head and the plain job").await;
    settle(&broker, one(a[0], lease, aside(10))).await;
    settle(&broker, one(p, lease, aside(10))).await;
    assert_eq!(
        waits(&broker, a[0], t0).await,
        (true, 10),
        "a1 stepped aside"
    );
    assert_eq!(
        waits(&broker, p, t0).await,
        (false, 10),
        "p retries as usual"
    );

    // a2 runs during a1's backoff, and a1's time comes while it runs.
    let lease = claims(&broker, &[a[1]], "a2 runs while a1 waits").await;
    advance(Duration::from_secs(10)).await;
    let lease_p = claims(&broker, &[p], "a1 waits for a2 to end").await;
    settle(&broker, one(p, lease_p, Outcome::Ack)).await;
    settle(&broker, one(a[1], lease, Outcome::Ack)).await;
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        (ids(&held.jobs), held.jobs[0].attempt),
        (vec![a[0]], 2),
        "a1 again, before a3"
    );
    assert!(record(&broker, a[2]).await.blocked, "a3 still waits");
    settle(&broker, one(a[0], held.lease, Outcome::Ack)).await;

    // Stepping aside twice: a3 for 20 s lets a4 run; a4 for 5 s finds no job due, so the
    // one due first, a4 itself, keeps the key.
    let lease = claims(&broker, &[a[2]], "a3").await;
    settle(&broker, one(a[2], lease, aside(20))).await;
    let lease = claims(&broker, &[a[3]], "a4 while a3 waits").await;
    settle(&broker, one(a[3], lease, aside(5))).await;
    assert_eq!(waits(&broker, a[2], t0).await, (true, 30), "a3 waits");
    assert_eq!(
        waits(&broker, a[3], t0).await,
        (false, 15),
        "a4 holds the key"
    );
    let none = fetch(&broker, "q", 10, TTL).await;
    assert!(
        none.jobs.is_empty(),
        "neither is due: {:?}",
        ids(&none.jobs)
    );
    advance(Duration::from_secs(5)).await;
    let lease = claims(&broker, &[a[3]], "a4 at its time").await;
    settle(&broker, one(a[3], lease, Outcome::Ack)).await;
    // a3 is the last job of its key: unblocked, at its own time.
    assert_eq!(
        waits(&broker, a[2], t0).await,
        (false, 30),
        "a3 holds the key"
    );
    let a5 = enqueue(&broker, vec![keyed("a", "a5")]).await[0];
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "a5 waits for a3"
    );
    advance(Duration::from_secs(15)).await;
    let lease = claims(&broker, &[a[2]], "a3 at its time").await;
    settle(&broker, one(a[2], lease, Outcome::Ack)).await;
    let lease = claims(&broker, &[a5], "a5 last").await;
    settle(&broker, one(a5, lease, Outcome::Ack)).await;

    // Alone on its key, a failed job keeps the key: a job enqueued later waits for it.
    let c1 = enqueue(&broker, vec![keyed("c", "c1")]).await[0];
    let lease = claims(&broker, &[c1], "c1").await;
    settle(&broker, one(c1, lease, aside(5))).await;
    let c2 = enqueue(&broker, vec![keyed("c", "c2")]).await[0];
    assert!(!record(&broker, c1).await.blocked, "c1 kept its key");
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "c2 waits"
    );
    advance(Duration::from_secs(5)).await;
    let lease = claims(&broker, &[c1], "c1 at its time").await;
    settle(&broker, one(c1, lease, Outcome::Ack)).await;
    let lease = claims(&broker, &[c2], "then c2").await;
    settle(&broker, one(c2, lease, Outcome::Ack)).await;

    // A cancelled job that stepped aside leaves the key to the others.
    let d = enqueue(
        &broker,
        vec![keyed("d", "d1"), keyed("d", "d2"), keyed("d", "d3")],
    )
    .await;
    let lease = claims(&broker, &[d[0]], "d1").await;
    settle(&broker, one(d[0], lease, aside(60))).await;
    broker.cancel(d[0]).await.unwrap();
    let lease = claims(&broker, &[d[1]], "d2").await;
    settle(&broker, one(d[1], lease, Outcome::Ack)).await;
    let lease = claims(&broker, &[d[2]], "d3, not the cancelled d1").await;
    settle(&broker, one(d[2], lease, Outcome::Ack)).await;
    assert!(fetch(&broker, "q", 10, TTL).await.jobs.is_empty());

    // Stepping aside for no time at all: due at once, the job is its key's next again.
    let z = enqueue(&broker, vec![keyed("z", "z1"), keyed("z", "z2")]).await;
    let lease = claims(&broker, &[z[0]], "z1").await;
    settle(&broker, one(z[0], lease, aside(0))).await;
    assert!(record(&broker, z[1]).await.blocked, "z2 still waits");
    let lease = claims(&broker, &[z[0]], "z1 again at once").await;
    settle(&broker, one(z[0], lease, Outcome::Ack)).await;
    let lease = claims(&broker, &[z[1]], "z2").await;
    settle(&broker, one(z[1], lease, Outcome::Ack)).await;

    // One settlement that ends a job of one key and steps a job of another aside.
    let mn = [("m", "m1"), ("m", "m2"), ("n", "n1"), ("n", "n2")];
    let mn = enqueue(&broker, mn.iter().map(|(k, n)| keyed(k, n)).collect()).await;
    let lease = claims(&broker, &[mn[0], mn[2]], "m1 and n1").await;
    let both = vec![
        Settlement {
            job: mn[0],
            lease,
            outcome: Outcome::Ack,
        },
        Settlement {
            job: mn[2],
            lease,
            outcome: aside(30),
        },
    ];
    assert_eq!(settle(&broker, both).await.applied, 2);
    let lease = claims(&broker, &[mn[1], mn[3]], "m2 after m1, n2 past n1").await;
    settle(&broker, one(mn[1], lease, Outcome::Ack)).await;
    settle(&broker, one(mn[3], lease, Outcome::Ack)).await;
    advance(Duration::from_secs(30)).await;
    let lease = claims(&broker, &[mn[2]], "n1 at its time").await;
    settle(&broker, one(mn[2], lease, Outcome::Ack)).await;

    // A dead letter re-driven while a job of its key stepped aside: as a job never run, it
    // is not passed over, and runs before the stepped-aside one whose time has not come.
    let r = enqueue(
        &broker,
        vec![keyed("r", "r1"), keyed("r", "r2"), keyed("r", "r3")],
    )
    .await;
    let lease = claims(&broker, &[r[0]], "r1").await;
    settle(&broker, one(r[0], lease, aside(60))).await;
    let lease = claims(&broker, &[r[1]], "r2 while r1 waits").await;
    let died = Outcome::DeadLetter { error: "no".into() };
    settle(&broker, one(r[1], lease, died)).await;
    let lease = claims(&broker, &[r[2]], "r3 after r2 died").await;
    let redriven = broker.retry_dead(&Selection::Jobs(vec![r[1]])).await;
    assert_eq!(redriven.unwrap(), 1);
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "r2 waits for r3"
    );
    settle(&broker, one(r[2], lease, Outcome::Ack)).await;
    let lease = claims(&broker, &[r[1]], "r2 before r1, whose time has not come").await;
    settle(&broker, one(r[1], lease, Outcome::Ack)).await;
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "r1 waits for its time"
    );
    advance(Duration::from_secs(60)).await;
    let lease = claims(&broker, &[r[0]], "r1 last").await;
    settle(&broker, one(r[0], lease, Outcome::Ack)).await;
}
