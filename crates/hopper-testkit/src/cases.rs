//! The cases. Each takes a fresh, empty broker built on
//! [`Clock::tokio`](hopper_core::Clock::tokio) and panics with a message naming what
//! differed. All but [`concurrent_claimers`] expect a current-thread runtime whose clock is
//! paused (`#[tokio::test(start_paused = true)]`), since they move time with
//! `tokio::time::advance`; [`concurrent_claimers`] expects a multi-thread runtime in real
//! time. [`broker_suite!`](crate::broker_suite) sets both up.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::{
    Broker, Budget, CancelOutcome, FetchRequest, JobId, JobState, LeaseId, NewJob, Outcome,
    QueueCounts, Settlement,
};
use tokio::time::advance;

use crate::helpers::{
    TTL, assert_each_once, claim_concurrently, enqueue, enqueue_n, fetch, fetch_request, ids, past,
    settle_all, skip,
};

async fn counts(broker: &Arc<dyn Broker>, queue: &str) -> QueueCounts {
    broker
        .counts(queue)
        .await
        .unwrap_or_else(|e| panic!("counts(`{queue}`) failed: {e:?}"))
}

fn counts_of(pending: u64, scheduled: u64, leased: u64, dead: u64) -> QueueCounts {
    QueueCounts {
        pending,
        scheduled,
        leased,
        dead,
    }
}

async fn record(broker: &Arc<dyn Broker>, id: JobId) -> hopper_core::JobRecord {
    broker
        .job(id)
        .await
        .unwrap_or_else(|e| panic!("job({id}) failed: {e:?}"))
        .unwrap_or_else(|| panic!("job({id}) not found"))
}

async fn settle(
    broker: &Arc<dyn Broker>,
    settlements: Vec<Settlement>,
) -> hopper_core::SettleReport {
    broker
        .settle(settlements.clone())
        .await
        .unwrap_or_else(|e| panic!("settle {settlements:?} failed: {e:?}"))
}

/// Skips `case` on a broker that pushes deliveries ([`Capabilities::pushed`]): there a
/// fetch takes only what has already arrived, and a delivery's id is not the id enqueue
/// returned, so a case that fetches right after enqueueing and compares ids does not apply.
/// Such brokers prove the same behaviour through workers in their own tests.
///
/// [`Capabilities::pushed`]: hopper_core::Capabilities::pushed
fn skip_if_pushed(broker: &Arc<dyn Broker>, case: &str) -> bool {
    let pushed = broker.capabilities().pushed;
    if pushed {
        skip(
            case,
            "the broker pushes deliveries: a fetch takes what has arrived, and a delivery's id \
             is not the id enqueue returned",
        );
    }
    pushed
}

fn one(id: JobId, lease: LeaseId, outcome: Outcome) -> Vec<Settlement> {
    vec![Settlement {
        job: id,
        lease,
        outcome,
    }]
}

/// Enqueueing one job and then many returns distinct ids in ascending order, the counts
/// see them all, and a job's record keeps what the producer gave it.
pub async fn enqueue_one_and_many(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "enqueue_one_and_many") {
        return;
    }
    let first = NewJob::new("q", vec![0u8, 159, 146, 150])
        .priority(3)
        .max_attempts(7)
        .header("trace", "abc")
        .header("tenant", "t1");
    let one = enqueue(&broker, vec![first.clone()]).await;
    let many = enqueue_n(&broker, "q", 5).await;
    let all: Vec<JobId> = one.iter().chain(&many).copied().collect();
    assert_eq!(
        all.iter().collect::<HashSet<_>>().len(),
        6,
        "ids are not distinct: {all:?}"
    );
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "ids are not in enqueue order: {all:?}"
    );
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(6, 0, 0, 0),
        "counts after 6 enqueued"
    );
    assert!(
        broker
            .enqueue(Vec::new())
            .await
            .expect("empty enqueue")
            .is_empty(),
        "an empty enqueue returns no ids"
    );

    let rec = record(&broker, one[0]).await;
    assert_eq!(rec.state, JobState::Pending, "state of a new job");
    assert_eq!(rec.last_error, None, "last_error of a new job");
    assert_eq!(rec.job.id, one[0]);
    assert_eq!(rec.job.queue, "q");
    assert_eq!(rec.job.payload, first.payload, "payload kept");
    assert_eq!(rec.job.priority, 3, "priority kept");
    assert_eq!(rec.job.max_attempts, 7, "max_attempts kept");
    assert_eq!(rec.job.headers, first.headers, "headers kept");
    assert_eq!(rec.job.attempt, 0, "attempt of a new job");
    assert_eq!(rec.job.lease, LeaseId(0), "lease of a pending job");
    assert_eq!(
        rec.job.run_at, rec.job.created_at,
        "a job for now runs at its creation"
    );

    let fetched = fetch(&broker, "q", 1, TTL).await;
    let job = &fetched.jobs[0];
    assert_eq!(job.id, one[0], "the priority-3 job comes first");
    assert_eq!(
        (
            &job.payload,
            &job.headers,
            job.priority,
            job.max_attempts,
            job.created_at
        ),
        (&first.payload, &first.headers, 3, 7, rec.job.created_at),
        "a fetched job carries what was enqueued"
    );

    assert_eq!(
        counts(&broker, "nowhere").await,
        QueueCounts::default(),
        "unknown queue"
    );
    assert!(
        broker.job(JobId(i64::MAX)).await.expect("job()").is_none(),
        "unknown id"
    );
    assert!(
        broker
            .dead_letters("nowhere", 10)
            .await
            .expect("dead_letters()")
            .is_empty(),
        "dead letters of an unknown queue"
    );
}

/// A fetch takes jobs by priority (descending), then `run_at`, then id, and returns them in
/// that order.
pub async fn fetch_order(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "fetch_order") {
        return;
    }
    if !broker.capabilities().priorities {
        return skip("fetch_order", "the broker does not order by priority");
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "a"),
            NewJob::new("q", "b").priority(5),
            NewJob::new("q", "c").run_at(past(60)),
            NewJob::new("q", "d").priority(5),
            NewJob::new("q", "e").priority(-1),
        ],
    )
    .await;
    let [a, b, c, d, e] = made[..] else {
        unreachable!("enqueue returned 5 ids")
    };
    let top = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(
        ids(&top.jobs),
        vec![b, d],
        "first fetch of 2: the priority-5 jobs by id"
    );
    let rest = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&rest.jobs),
        vec![c, a, e],
        "second fetch: priority 0 by run_at (c is older), then priority -1"
    );
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 5, 0));
}

/// A delayed job is scheduled, not fetched before its time, reported as `next_due` by a
/// short fetch, and fetched from the millisecond it is due.
pub async fn delayed_jobs(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "delayed_jobs") {
        return;
    }
    if !broker.capabilities().delayed {
        return skip("delayed_jobs", "the broker does not support delayed jobs");
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "later").delay(Duration::from_secs(10)),
            NewJob::new("q", "now"),
        ],
    )
    .await;
    let (later, now) = (made[0], made[1]);
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(1, 1, 0, 0),
        "one due, one scheduled"
    );
    let due_at = record(&broker, later).await.job.run_at;
    let created = record(&broker, later).await.job.created_at;
    assert_eq!(due_at - created, 10_000, "run_at is 10 s after creation");

    let short = fetch(&broker, "q", 5, TTL).await;
    assert_eq!(ids(&short.jobs), vec![now], "only the due job is fetched");
    assert_eq!(
        short.next_due,
        Some(due_at),
        "a short fetch reports when the next job is due"
    );

    advance(Duration::from_millis(9_999)).await;
    let early = fetch(&broker, "q", 5, TTL).await;
    assert!(
        early.jobs.is_empty(),
        "fetched 1 ms before due: {:?}",
        ids(&early.jobs)
    );
    assert_eq!(early.next_due, Some(due_at), "next_due 1 ms before due");

    advance(Duration::from_millis(1)).await;
    let due = fetch(&broker, "q", 5, TTL).await;
    assert_eq!(
        ids(&due.jobs),
        vec![later],
        "the delayed job is fetched once due"
    );
    assert_eq!(due.jobs[0].attempt, 1, "attempt of the delayed job");
    assert_eq!(due.next_due, None, "nothing else is scheduled");
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 2, 0));
}

/// A fetch never takes more than its limit, and charges each job it takes one attempt.
pub async fn fetch_capped_by_limit(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "fetch_capped_by_limit") {
        return;
    }
    let made = enqueue_n(&broker, "q", 30).await;
    let fetched = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(fetched.jobs.len(), 10, "30 pending, limit 10");
    assert_eq!(
        ids(&fetched.jobs),
        made[..10].to_vec(),
        "the oldest 10, in order"
    );
    let attempts: Vec<u32> = fetched.jobs.iter().map(|j| j.attempt).collect();
    assert_eq!(attempts, vec![1; 10], "each claimed job is on attempt 1");
    assert_eq!(fetched.next_due, None, "a full fetch reports no next_due");
    assert_eq!(counts(&broker, "q").await, counts_of(20, 0, 10, 0));
    let next = fetch(&broker, "q", 15, TTL).await;
    assert_eq!(ids(&next.jobs), made[10..25].to_vec(), "the next 15");
}

/// One fetch serves several queues, each within its own budget, and orders the result
/// globally by priority, then `run_at`, then id.
pub async fn per_queue_budgets(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "per_queue_budgets") {
        return;
    }
    let caps = broker.capabilities();
    if !caps.priorities || !caps.delayed {
        return skip(
            "per_queue_budgets",
            "the broker does not order by priority and run_at",
        );
    }
    let a = enqueue_n(&broker, "a", 20).await;
    let mut b_jobs: Vec<NewJob> = (0..10)
        .map(|i| NewJob::new("b", vec![i]).priority(2))
        .collect();
    b_jobs.extend((10..20).map(|i| NewJob::new("b", vec![i]).run_at(past(60))));
    let b = enqueue(&broker, b_jobs).await;

    let request = |a_limit, b_limit| FetchRequest {
        budgets: vec![
            Budget {
                queue: "a".into(),
                limit: a_limit,
            },
            Budget {
                queue: "b".into(),
                limit: b_limit,
            },
        ],
        lease_ttl: TTL,
    };
    let first = fetch_request(&broker, request(5, 2)).await;
    let expected: Vec<JobId> = b[..2].iter().chain(&a[..5]).copied().collect();
    assert_eq!(
        ids(&first.jobs),
        expected,
        "budgets a:5 b:2: b's two priority-2 jobs, then a's first five"
    );
    assert_eq!(counts(&broker, "a").await.leased, 5, "taken from a");
    assert_eq!(counts(&broker, "b").await.leased, 2, "taken from b");

    let second = fetch_request(&broker, request(3, 10)).await;
    let expected: Vec<JobId> = b[2..12].iter().chain(&a[5..8]).copied().collect();
    assert_eq!(
        ids(&second.jobs),
        expected,
        "budgets a:3 b:10: b's 8 priority-2 jobs, b's 2 older priority-0 jobs, then a's 3"
    );
    assert_eq!(counts(&broker, "a").await, counts_of(12, 0, 8, 0));
    assert_eq!(counts(&broker, "b").await, counts_of(8, 0, 12, 0));
}

/// Everything one fetch returns shares one lease, across queues; each fetch has its own.
pub async fn one_lease_per_fetch(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "one_lease_per_fetch") {
        return;
    }
    enqueue_n(&broker, "x", 4).await;
    enqueue_n(&broker, "y", 2).await;
    let request = FetchRequest {
        budgets: vec![
            Budget {
                queue: "x".into(),
                limit: 2,
            },
            Budget {
                queue: "y".into(),
                limit: 2,
            },
        ],
        lease_ttl: TTL,
    };
    let first = fetch_request(&broker, request).await;
    assert_eq!(first.jobs.len(), 4, "2 from x and 2 from y");
    assert_ne!(first.lease, LeaseId(0), "a fetch's lease is never 0");
    for job in &first.jobs {
        assert_eq!(
            job.lease, first.lease,
            "job {} carries its fetch's lease",
            job.id
        );
        let rec = record(&broker, job.id).await;
        assert_eq!(rec.state, JobState::Leased, "job {} is leased", job.id);
        assert_eq!(
            rec.job.queue, job.queue,
            "job {}'s record names its queue",
            job.id
        );
        assert_eq!(
            rec.job.lease, first.lease,
            "job {}'s record names the lease",
            job.id
        );
    }
    let second = fetch(&broker, "x", 10, TTL).await;
    assert_eq!(second.jobs.len(), 2, "the 2 left in x");
    assert_ne!(second.lease, first.lease, "two fetches share a lease");
    assert!(second.jobs.iter().all(|j| j.lease == second.lease));
}

/// A renewed lease outlives its first expiry: nobody else can fetch its jobs, and its
/// holder can still settle them.
pub async fn lease_renewal(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "lease_renewal") {
        return;
    }
    if !broker.capabilities().leases {
        return skip("lease_renewal", "the broker has no leases");
    }
    enqueue_n(&broker, "q", 3).await;
    let held = fetch(&broker, "q", 3, TTL).await;
    assert_eq!(held.jobs.len(), 3);
    advance(Duration::from_secs(20)).await;
    let lost = broker.renew(&[held.lease], TTL).await.expect("renew");
    assert!(lost.is_empty(), "a live lease reported lost: {lost:?}");
    advance(Duration::from_secs(20)).await;
    let other = fetch(&broker, "q", 10, TTL).await;
    assert!(
        other.jobs.is_empty(),
        "40 s after a 30 s lease renewed at 20 s, another fetch took {:?}",
        ids(&other.jobs)
    );
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 3, 0));
    let report = settle(&broker, settle_all(&held, &Outcome::Ack)).await;
    assert_eq!(report.applied, 3, "acks under the renewed lease");
    assert!(report.fenced.is_empty(), "fenced: {:?}", report.fenced);
    assert_eq!(counts(&broker, "q").await, QueueCounts::default());
}

/// An expired lease gives its jobs to the next fetch, on a new lease and a new attempt; the
/// old holder is fenced off: its settlements change nothing and its renewal reports the
/// lease lost.
pub async fn lease_expiry_and_fencing(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "lease_expiry_and_fencing") {
        return;
    }
    if !broker.capabilities().leases {
        return skip("lease_expiry_and_fencing", "the broker has no leases");
    }
    let made = enqueue_n(&broker, "q", 2).await;
    let old = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(ids(&old.jobs), made);
    advance(Duration::from_secs(31)).await;
    let new = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&new.jobs),
        made,
        "the expired jobs go to the next fetch, in order"
    );
    assert_ne!(new.lease, old.lease, "under a new lease");
    let attempts: Vec<u32> = new.jobs.iter().map(|j| j.attempt).collect();
    assert_eq!(attempts, vec![2, 2], "each on its second attempt");

    let report = settle(&broker, settle_all(&old, &Outcome::Ack)).await;
    assert_eq!(report.applied, 0, "acks under the expired lease applied");
    assert_eq!(
        report.fenced, made,
        "acks under the expired lease are fenced"
    );
    for id in &made {
        let rec = record(&broker, *id).await;
        assert_eq!(rec.state, JobState::Leased, "job {id} after a fenced ack");
        assert_eq!(
            rec.job.lease, new.lease,
            "job {id} stays with the new lease"
        );
        assert_eq!(rec.job.attempt, 2, "job {id} attempt after a fenced ack");
    }
    let lost = broker
        .renew(&[old.lease, new.lease], TTL)
        .await
        .expect("renew");
    assert_eq!(lost, vec![old.lease], "only the expired lease is lost");
    let report = settle(&broker, settle_all(&new, &Outcome::Ack)).await;
    assert_eq!(report.applied, 2, "acks under the new lease");
}

/// A lease that expires on the job's last allowed attempt dead-letters the job instead of
/// returning it; one with attempts left returns it.
pub async fn expiry_on_final_attempt(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "expiry_on_final_attempt") {
        return;
    }
    if !broker.capabilities().leases {
        return skip("expiry_on_final_attempt", "the broker has no leases");
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "last").max_attempts(1),
            NewJob::new("q", "again").max_attempts(2),
        ],
    )
    .await;
    let (last, again) = (made[0], made[1]);
    let held = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(held.jobs.len(), 2);
    advance(Duration::from_secs(31)).await;
    let next = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&next.jobs),
        vec![again],
        "only the job with attempts left returns"
    );
    assert_eq!(next.jobs[0].attempt, 2);
    let rec = record(&broker, last).await;
    assert_eq!(rec.state, JobState::Dead, "the job out of attempts");
    assert_eq!(
        rec.last_error.as_deref(),
        Some("lease expired on the final attempt"),
        "its error"
    );
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 1, 1));
    let dead = broker.dead_letters("q", 10).await.expect("dead_letters");
    assert_eq!(
        dead.iter().map(|r| r.job.id).collect::<Vec<_>>(),
        vec![last]
    );
}

/// A retry puts the job back after its delay with its error kept; the next fetch charges
/// the next attempt.
pub async fn retry_counts_attempts(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "retry_counts_attempts") {
        return;
    }
    if !broker.capabilities().delayed {
        return skip(
            "retry_counts_attempts",
            "the broker does not support delays",
        );
    }
    let id = enqueue_n(&broker, "q", 1).await[0];
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(held.jobs[0].attempt, 1);
    let retry = Outcome::Retry {
        delay: Duration::from_secs(5),
        error: "first failure".into(),
    };
    let report = settle(&broker, one(id, held.lease, retry)).await;
    assert_eq!(report.applied, 1, "retry applied");
    let rec = record(&broker, id).await;
    assert_eq!(rec.state, JobState::Pending, "state while backing off");
    assert_eq!(rec.job.attempt, 1, "the attempt stays charged");
    assert_eq!(rec.last_error.as_deref(), Some("first failure"));
    assert_eq!(rec.job.lease, LeaseId(0), "no lease while backing off");
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(0, 1, 0, 0),
        "backing off is scheduled"
    );

    let now = fetch(&broker, "q", 1, TTL).await;
    assert!(now.jobs.is_empty(), "fetched at once after a 5 s retry");
    assert_eq!(
        now.next_due,
        Some(rec.job.run_at),
        "next_due is the retry time"
    );
    advance(Duration::from_millis(4_999)).await;
    assert!(
        fetch(&broker, "q", 1, TTL).await.jobs.is_empty(),
        "fetched 1 ms early"
    );
    advance(Duration::from_millis(1)).await;
    let again = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(
        ids(&again.jobs),
        vec![id],
        "fetched once the delay has passed"
    );
    assert_eq!(again.jobs[0].attempt, 2, "second attempt");
    let rec = record(&broker, id).await;
    assert_eq!(rec.state, JobState::Leased);
    assert_eq!(
        rec.last_error.as_deref(),
        Some("first failure"),
        "error kept while leased"
    );
}

/// Dead letters keep their error, are listed oldest first, are counted, and never run
/// again.
pub async fn dead_letters(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "dead_letters") {
        return;
    }
    let made = enqueue_n(&broker, "q", 2).await;
    let held = fetch(&broker, "q", 2, TTL).await;
    let dead = |error: &str| Outcome::DeadLetter {
        error: error.into(),
    };
    let report = settle(&broker, one(made[1], held.lease, dead("bang"))).await;
    assert_eq!(report.applied, 1);
    advance(Duration::from_secs(1)).await;
    let report = settle(&broker, one(made[0], held.lease, dead("boom"))).await;
    assert_eq!(report.applied, 1);

    let rec = record(&broker, made[0]).await;
    assert_eq!(rec.state, JobState::Dead);
    assert_eq!(rec.last_error.as_deref(), Some("boom"));
    assert_eq!(rec.job.lease, LeaseId(0), "a dead job has no lease");
    assert_eq!(counts(&broker, "q").await, counts_of(0, 0, 0, 2));
    let listed = broker.dead_letters("q", 10).await.expect("dead_letters");
    assert_eq!(
        listed.iter().map(|r| r.job.id).collect::<Vec<_>>(),
        vec![made[1], made[0]],
        "oldest dead letter first"
    );
    assert_eq!(
        listed
            .iter()
            .map(|r| r.last_error.as_deref())
            .collect::<Vec<_>>(),
        vec![Some("bang"), Some("boom")]
    );
    assert!(listed.iter().all(|r| r.state == JobState::Dead));
    let limited = broker.dead_letters("q", 1).await.expect("dead_letters");
    assert_eq!(limited.len(), 1, "limit 1");
    assert_eq!(limited[0].job.id, made[1]);
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "a dead letter was fetched"
    );
    advance(Duration::from_secs(3600)).await;
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "a dead letter came back"
    );
}

/// A released job goes back to its place in the queue without its attempt charged.
pub async fn release_is_attempt_neutral(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "release_is_attempt_neutral") {
        return;
    }
    let made = enqueue_n(&broker, "q", 2).await;
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(ids(&held.jobs), vec![made[0]]);
    assert_eq!(held.jobs[0].attempt, 1);
    let report = settle(&broker, settle_all(&held, &Outcome::Release)).await;
    assert_eq!(report.applied, 1, "release applied");
    let rec = record(&broker, made[0]).await;
    assert_eq!(rec.state, JobState::Pending, "state after release");
    assert_eq!(rec.job.attempt, 0, "attempt after release");
    let again = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(
        ids(&again.jobs),
        vec![made[0]],
        "the released job keeps its place"
    );
    assert_eq!(again.jobs[0].attempt, 1, "attempt after release and fetch");
}

/// A job's payload comes back byte for byte however the job returns to its queue: after
/// its lease expired, after a release, after a retry, and in its record while held. The
/// sizes straddle the memory broker's inline copy of a held payload (64 bytes).
pub async fn payloads_survive_every_return(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "payloads_survive_every_return") {
        return;
    }
    let payloads: Vec<Vec<u8>> = [0usize, 3, 64, 65, 10_000]
        .iter()
        .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
        .collect();
    let made = enqueue(
        &broker,
        payloads
            .iter()
            .map(|p| NewJob::new("q", p.clone()))
            .collect(),
    )
    .await;
    let by_id = |fetched: &hopper_core::Fetched| -> Vec<(JobId, Vec<u8>)> {
        let mut got: Vec<_> = fetched
            .jobs
            .iter()
            .map(|j| (j.id, j.payload.clone()))
            .collect();
        got.sort();
        got
    };
    let want: Vec<(JobId, Vec<u8>)> = made.iter().copied().zip(payloads.clone()).collect();

    let first = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(by_id(&first), want, "payloads as fetched");
    for (id, payload) in &want {
        let rec = record(&broker, *id).await;
        assert_eq!(rec.state, JobState::Leased, "job {id} is held");
        assert_eq!(
            &rec.job.payload, payload,
            "job {id}'s payload in its record while held"
        );
    }
    let again = if broker.capabilities().leases {
        advance(Duration::from_secs(31)).await;
        let again = fetch(&broker, "q", 10, TTL).await;
        assert_eq!(by_id(&again), want, "payloads after the lease expired");
        again
    } else {
        skip(
            "payloads_survive_every_return",
            "the broker has no leases to expire",
        );
        first
    };

    let settlements: Vec<Settlement> = again
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| Settlement {
            job: j.id,
            lease: j.lease,
            outcome: if i % 2 == 0 {
                Outcome::Release
            } else {
                Outcome::Retry {
                    delay: Duration::ZERO,
                    error: "once more".into(),
                }
            },
        })
        .collect();
    let report = settle(&broker, settlements).await;
    assert_eq!(report.applied, want.len(), "releases and retries applied");
    let last = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        by_id(&last),
        want,
        "payloads after a release (even positions) or a retry (odd)"
    );
}

/// Cancelling a pending job means it never runs; a held job is reported with its lease.
pub async fn cancel(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "cancel") {
        return;
    }
    let made = enqueue_n(&broker, "q", 3).await;
    let cancelled = broker.cancel(made[1]).await.expect("cancel");
    assert_eq!(
        cancelled,
        CancelOutcome::Cancelled,
        "cancelling a pending job"
    );
    assert_eq!(record(&broker, made[1]).await.state, JobState::Cancelled);
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(2, 0, 0, 0),
        "counts after cancel"
    );

    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&held.jobs),
        vec![made[0], made[2]],
        "the cancelled job was fetched"
    );
    assert_eq!(
        broker.cancel(made[0]).await.expect("cancel"),
        CancelOutcome::Held(held.lease),
        "cancelling a held job"
    );
    assert_eq!(
        record(&broker, made[0]).await.state,
        JobState::Leased,
        "a held job stays"
    );
    assert_eq!(
        broker.cancel(made[1]).await.expect("cancel"),
        CancelOutcome::NotFound,
        "cancelling twice"
    );
    assert_eq!(
        broker.cancel(JobId(i64::MAX)).await.expect("cancel"),
        CancelOutcome::NotFound,
        "cancelling an unknown id"
    );
    advance(Duration::from_secs(3600)).await;
    let later = fetch(&broker, "q", 10, TTL).await;
    assert!(
        !ids(&later.jobs).contains(&made[1]),
        "the cancelled job was fetched after the leases expired"
    );
}

/// Settlements in one call apply or are fenced one by one.
pub async fn settle_batch_is_per_job(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "settle_batch_is_per_job") {
        return;
    }
    let made = enqueue_n(&broker, "q", 3).await;
    let held = fetch(&broker, "q", 3, TTL).await;
    let report = settle(
        &broker,
        vec![
            Settlement {
                job: made[0],
                lease: held.lease,
                outcome: Outcome::Ack,
            },
            Settlement {
                job: made[1],
                lease: held.lease,
                outcome: Outcome::Retry {
                    delay: Duration::ZERO,
                    error: "again".into(),
                },
            },
            Settlement {
                job: made[2],
                lease: LeaseId(held.lease.0 ^ 1),
                outcome: Outcome::Ack,
            },
            Settlement {
                job: JobId(i64::MAX),
                lease: held.lease,
                outcome: Outcome::Ack,
            },
        ],
    )
    .await;
    assert_eq!(
        report.applied, 2,
        "the ack and the retry under the right lease"
    );
    assert_eq!(
        report.fenced,
        vec![made[2], JobId(i64::MAX)],
        "the wrong lease and the unknown job are fenced"
    );
    match broker.job(made[0]).await.expect("job()") {
        None => {}
        Some(rec) => assert_eq!(rec.state, JobState::Completed, "an acked job"),
    }
    let retried = record(&broker, made[1]).await;
    assert_eq!(retried.state, JobState::Pending);
    assert_eq!(retried.last_error.as_deref(), Some("again"));
    let fenced = record(&broker, made[2]).await;
    assert_eq!(
        fenced.state,
        JobState::Leased,
        "the fenced job is still held"
    );
    assert_eq!(fenced.job.lease, held.lease);
    let again = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(
        ids(&again.jobs),
        vec![made[1]],
        "a zero-delay retry is due at once"
    );
    assert_eq!(again.jobs[0].attempt, 2);
}

/// Purging a queue removes its jobs in every state, and only its jobs.
pub async fn purge_removes_every_state(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "purge_removes_every_state") {
        return;
    }
    if !broker.capabilities().delayed {
        return skip(
            "purge_removes_every_state",
            "the broker does not support delays",
        );
    }
    let made = enqueue(
        &broker,
        vec![
            NewJob::new("q", "leased"),
            NewJob::new("q", "dead"),
            NewJob::new("q", "pending"),
            NewJob::new("q", "scheduled").delay(Duration::from_secs(3600)),
            NewJob::new("other", "kept"),
        ],
    )
    .await;
    let held = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(ids(&held.jobs), made[..2].to_vec());
    let dead = Outcome::DeadLetter { error: "x".into() };
    settle(&broker, one(made[1], held.lease, dead)).await;
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(1, 1, 1, 1),
        "one job in each state"
    );

    let gone = broker.purge("q").await.expect("purge");
    assert_eq!(gone, 4, "purged jobs");
    assert_eq!(
        counts(&broker, "q").await,
        QueueCounts::default(),
        "counts after purge"
    );
    assert_eq!(
        counts(&broker, "other").await,
        counts_of(1, 0, 0, 0),
        "other queue kept"
    );
    for id in &made[..4] {
        assert!(
            broker.job(*id).await.expect("job()").is_none(),
            "job {id} survived purge"
        );
    }
    let report = settle(&broker, one(made[0], held.lease, Outcome::Ack)).await;
    assert_eq!(
        report.fenced,
        vec![made[0]],
        "settling a purged job is fenced"
    );
    assert!(fetch(&broker, "q", 10, TTL).await.jobs.is_empty());
}

/// The wake signal changes after an enqueue, a release and a retry.
pub async fn wake_signal_on_new_work(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "wake_signal_on_new_work") {
        return;
    }
    let Some(mut wake) = broker.wake_signal() else {
        return skip("wake_signal_on_new_work", "the broker has no wake signal");
    };
    wake.borrow_and_update();
    let id = enqueue_n(&broker, "q", 1).await[0];
    assert!(
        wake.has_changed().expect("signal alive"),
        "no wake after enqueue"
    );
    wake.borrow_and_update();

    let held = fetch(&broker, "q", 1, TTL).await;
    settle(&broker, one(id, held.lease, Outcome::Release)).await;
    assert!(
        wake.has_changed().expect("signal alive"),
        "no wake after release"
    );
    wake.borrow_and_update();

    let held = fetch(&broker, "q", 1, TTL).await;
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        error: "e".into(),
    };
    settle(&broker, one(id, held.lease, retry)).await;
    assert!(
        wake.has_changed().expect("signal alive"),
        "no wake after retry"
    );
}

/// A bad queue name refuses the whole enqueue with an error naming `queue`; nothing of it
/// is stored.
pub async fn bad_queue_name(broker: Arc<dyn Broker>) {
    let long = "q".repeat(129);
    for bad in ["bad queue!", "", long.as_str(), "ünïcode"] {
        let err = broker
            .enqueue(vec![NewJob::new("good", "a"), NewJob::new(bad, "b")])
            .await
            .expect_err(&format!("queue name {bad:?} accepted"));
        assert!(
            err.is_config(),
            "queue name {bad:?}: not a config error: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("queue") && text.contains(bad),
            "the error for {bad:?} names neither the setting nor the value: {text}"
        );
    }
    assert_eq!(
        counts(&broker, "good").await,
        QueueCounts::default(),
        "a refused enqueue stored its valid jobs"
    );
    let fine = enqueue(&broker, vec![NewJob::new("A-z_0.9:x", "ok")]).await;
    assert_eq!(fine.len(), 1, "every allowed character");
}

/// 2,000 jobs claimed by 8 concurrent tasks in batches of 25: each job exactly once.
pub async fn concurrent_claimers(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "concurrent_claimers") {
        return;
    }
    let mut made = Vec::with_capacity(2_000);
    for _ in 0..4 {
        made.extend(enqueue_n(&broker, "q", 500).await);
    }
    let seen = claim_concurrently(std::slice::from_ref(&broker), "q", 8, 25).await;
    assert_each_once(&seen, &made);
    assert_eq!(
        counts(&broker, "q").await,
        QueueCounts::default(),
        "all acked"
    );
}
