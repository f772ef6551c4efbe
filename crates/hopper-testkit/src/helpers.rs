//! Shorthands the cases share, public so broker crates can write their own cases alike.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hopper_core::{
    Broker, FetchRequest, Fetched, Job, JobId, LeaseId, NewJob, Outcome, Settlement,
};

/// The lease every case asks for unless it tests leases.
pub const TTL: Duration = Duration::from_secs(30);

/// The RabbitMQ server the tests use: `HOPPER_TEST_AMQP_URL`, else the local one.
pub fn amqp_url() -> String {
    std::env::var("HOPPER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// Prints the line that marks a skipped case; a case never skips silently.
pub fn skip(case: &str, reason: &str) {
    eprintln!("skipped: {case}: {reason}");
}

/// A wall-clock time `secs` seconds before now: a `run_at` that is already due.
pub fn past(secs: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(secs)
}

/// A job as a broker hands it out, for tests that make their own: `id` on queue `q`,
/// first attempt of 25, no headers, every time 0, under lease 1.
pub fn job(id: i64, payload: Vec<u8>) -> Job {
    Job {
        id: JobId(id),
        queue: "q".into(),
        payload,
        priority: 0,
        run_at: 0,
        attempt: 1,
        max_attempts: 25,
        headers: Default::default(),
        created_at: 0,
        lease: LeaseId(1),
    }
}

/// `n` jobs on `queue` whose payload is their index as JSON.
pub fn jobs(queue: &str, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::json(queue, &i).expect("an index encodes as JSON"))
        .collect()
}

/// Enqueues `n` jobs (see [`jobs`]) in one call and returns their ids.
pub async fn enqueue_n(broker: &Arc<dyn Broker>, queue: &str, n: usize) -> Vec<JobId> {
    let ids = broker
        .enqueue(jobs(queue, n))
        .await
        .unwrap_or_else(|e| panic!("enqueueing {n} jobs on `{queue}` failed: {e:?}"));
    assert_eq!(
        ids.len(),
        n,
        "enqueue of {n} jobs returned {} ids",
        ids.len()
    );
    ids
}

/// Enqueues `jobs` in one call and returns their ids.
pub async fn enqueue(broker: &Arc<dyn Broker>, jobs: Vec<NewJob>) -> Vec<JobId> {
    let n = jobs.len();
    let ids = broker
        .enqueue(jobs)
        .await
        .unwrap_or_else(|e| panic!("enqueueing {n} jobs failed: {e:?}"));
    assert_eq!(
        ids.len(),
        n,
        "enqueue of {n} jobs returned {} ids",
        ids.len()
    );
    ids
}

/// Fetches up to `limit` jobs from one queue under a lease of `ttl`.
pub async fn fetch(broker: &Arc<dyn Broker>, queue: &str, limit: usize, ttl: Duration) -> Fetched {
    fetch_request(broker, FetchRequest::one(queue, limit, ttl)).await
}

/// Sends one fetch request, panicking with the request on error.
pub async fn fetch_request(broker: &Arc<dyn Broker>, request: FetchRequest) -> Fetched {
    let fetched = broker
        .fetch(request.clone())
        .await
        .unwrap_or_else(|e| panic!("fetch {request:?} failed: {e:?}"));
    assert!(
        fetched.jobs.len() <= request.total(),
        "fetch {request:?} returned {} jobs, more than asked",
        fetched.jobs.len()
    );
    fetched
}

/// The ids of `jobs`, in order.
/// The payloads of `jobs` as text, sorted: what a claim returned, whatever its order.
pub fn sorted_payloads(jobs: &[Job]) -> Vec<String> {
    let mut payloads: Vec<String> = jobs
        .iter()
        .map(|j| String::from_utf8_lossy(&j.payload).into_owned())
        .collect();
    payloads.sort();
    payloads
}

pub fn ids(jobs: &[Job]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

/// One settlement with `outcome` for every job of a fetch, under its lease.
pub fn settle_all(fetched: &Fetched, outcome: &Outcome) -> Vec<Settlement> {
    fetched
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: fetched.lease,
            outcome: outcome.clone(),
        })
        .collect()
}

/// Runs `tasks` claimers at once, spread over `brokers` in turn, each fetching up to
/// `batch` jobs of `queue` and acknowledging them until a fetch comes back empty. Returns
/// every id acknowledged, in no particular order. Panics if a fetch returns more than
/// `batch` jobs or an acknowledgement is fenced.
pub async fn claim_concurrently(
    brokers: &[Arc<dyn Broker>],
    queue: &str,
    tasks: usize,
    batch: usize,
) -> Vec<JobId> {
    assert!(!brokers.is_empty(), "claim_concurrently needs a broker");
    let mut claimers = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let broker = brokers[task % brokers.len()].clone();
        let queue = queue.to_owned();
        claimers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let fetched = fetch(&broker, &queue, batch, Duration::from_secs(300)).await;
                if fetched.jobs.is_empty() {
                    return seen;
                }
                let report = broker
                    .settle(settle_all(&fetched, &Outcome::Ack))
                    .await
                    .unwrap_or_else(|e| panic!("claimer {task}: settle failed: {e:?}"));
                assert!(
                    report.fenced.is_empty(),
                    "claimer {task}: acks fenced: {:?}",
                    report.fenced
                );
                assert_eq!(
                    report.applied,
                    fetched.jobs.len(),
                    "claimer {task}: acks applied"
                );
                seen.extend(ids(&fetched.jobs));
            }
        }));
    }
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(claimer.await.expect("a claimer task panicked"));
    }
    all
}

/// Job `name` of queue `q`, with the rate key `key` unless it is empty.
pub fn rate_keyed(name: &str, key: &str) -> NewJob {
    let job = NewJob::new("q", name.as_bytes().to_vec());
    if key.is_empty() {
        job
    } else {
        job.rate_key(key)
    }
}

/// The race every broker that keeps rate limits per key runs across processes: with `q`
/// limited to 5 per key for longer than the race, 140 jobs go in through the first of
/// `brokers` (40 of each of the keys `a`, `b` and `c`, 20 without, interleaved), then 8
/// claimers in batches of 7 spread over `brokers` take what they can. Panics unless they
/// took exactly 5 of each key and 5 without, and the other 120 were moved to their keys'
/// next room.
pub async fn race_on_rate_keys(brokers: &[Arc<dyn Broker>]) {
    let key_of = |i: usize| match i % 7 {
        0 | 1 => "",
        n => ["a", "b", "c"][n % 3],
    };
    let jobs = (0..140).map(|i| rate_keyed(&i.to_string(), key_of(i)));
    let ids = brokers[0].enqueue(jobs.collect()).await.unwrap();
    let seen = claim_concurrently(brokers, "q", 8, 7).await;
    let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
    for id in &seen {
        let at = ids.iter().position(|i| i == id).unwrap();
        *per.entry(key_of(at)).or_default() += 1;
    }
    let per: Vec<(&str, usize)> = per.into_iter().collect();
    assert_eq!(per, [("", 5), ("a", 5), ("b", 5), ("c", 5)]);
    let counts = brokers[0].counts("q").await.unwrap();
    assert_eq!(
        (counts.pending, counts.scheduled),
        (0, 120),
        "every job held back was moved to its key's next room"
    );
}

/// Panics unless `seen` holds each of `expected` exactly once and nothing else.
pub fn assert_each_once(seen: &[JobId], expected: &[JobId]) {
    let mut times: HashMap<JobId, usize> = HashMap::with_capacity(expected.len());
    for id in seen {
        *times.entry(*id).or_default() += 1;
    }
    let twice: Vec<_> = times
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        twice.is_empty(),
        "{} jobs were claimed more than once: {twice:?}",
        twice.len()
    );
    let missing: Vec<_> = expected
        .iter()
        .filter(|id| !times.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} jobs were never claimed: {missing:?}",
        missing.len()
    );
    assert_eq!(seen.len(), expected.len(), "jobs claimed in total");
}

/// Asserts that `queue`'s dead letters are exactly `expected`: each payload (as text, in
/// payload order) with its last error.
pub async fn assert_dead_letters(broker: &dyn Broker, queue: &str, expected: &[(&str, &str)]) {
    let mut found: Vec<(String, String)> = broker
        .dead_letters(queue, expected.len() + 10)
        .await
        .unwrap_or_else(|e| panic!("dead letters of {queue}: {e}"))
        .into_iter()
        .map(|r| {
            let payload = String::from_utf8_lossy(&r.job.payload).into_owned();
            (payload, r.last_error.unwrap_or_default())
        })
        .collect();
    found.sort();
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(p, e)| ((*p).to_owned(), (*e).to_owned()))
        .collect();
    assert_eq!(found, expected, "dead letters of {queue}");
}
