//! Ordering keys through real workers: many workers, many keys, random durations and
//! failures, and still one job of a key at a time, in enqueue order; or, with failed jobs
//! stepping aside for their retries, one at a time with first attempts in enqueue order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Clock, JobContext, JobError, NewJob, QueueOptions, RetryPolicy};
use tokio::time::Instant;

use super::{Target, builder, choose_clock, counts, skip_for};
use crate::helpers::enqueue;

const KEYS: u64 = 50;
const PER_KEY: u64 = 100;

/// One handler call of a keyed job.
#[derive(Debug, Clone, Copy)]
struct Span {
    seq: u64,
    attempt: u32,
    start: Instant,
    end: Instant,
    ok: bool,
}

/// 4 workers of 8 slots each run 50 keys × 100 jobs. Each call sleeps 1–4 ms and fails
/// one time in ten (3 attempts allowed, so a few die). For every key, the calls never
/// overlap, and they go in enqueue order: each job's calls all come before the next job's
/// first. Every job ends, and each dead one is one that failed its 3 attempts.
pub async fn ordered_keys_run_in_order(target: Target) {
    let calls = run_keys(target, true, "ordered_keys_run_in_order").await;
    for (key, calls) in calls {
        for pair in calls.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let next = if a.ok || a.attempt == 3 {
                a.seq + 1
            } else {
                a.seq
            };
            assert_eq!(
                (b.seq, b.attempt),
                (next, if next == a.seq { a.attempt + 1 } else { 1 }),
                "key {key}: after job {} attempt {} (ok: {})",
                a.seq,
                a.attempt,
                a.ok
            );
        }
    }
}

/// The same run with `retries_hold_key(false)`: a failed job steps aside, so the key's
/// next jobs run during its backoff. The calls of a key still never overlap, each job's
/// attempts come in order, and first attempts come in enqueue order; and nine failures in
/// ten or more let another job of the key run next.
pub async fn ordered_retries_step_aside_in_workers(target: Target) {
    let name = "ordered_retries_step_aside_in_workers";
    let calls = run_keys(target, false, name).await;
    if calls.is_empty() {
        return;
    }
    let (mut failures, mut passed) = (0, 0);
    for (key, calls) in calls {
        let mut attempts = BTreeMap::<u64, u32>::new();
        let mut first = Vec::new();
        for call in &calls {
            let last = attempts.entry(call.seq).or_default();
            assert_eq!(
                call.attempt,
                *last + 1,
                "key {key}: job {}'s attempts",
                call.seq
            );
            *last = call.attempt;
            if call.attempt == 1 {
                first.push(call.seq);
            }
        }
        assert!(
            first.windows(2).all(|w| w[0] < w[1]),
            "key {key}: first attempts out of order: {first:?}"
        );
        for pair in calls.windows(2) {
            if !pair[0].ok && pair[0].attempt < 3 {
                failures += 1;
                passed += u64::from(pair[1].seq != pair[0].seq);
            }
        }
    }
    println!("{name}: {passed} of {failures} failed attempts let another job of the key run");
    // A failure keeps its key only when no job of the key waits that it could let pass:
    // at the end of a key's line, or behind jobs all stepped aside and due later.
    assert!(
        passed * 10 >= failures * 9,
        "{passed} of {failures} failures stepped aside"
    );
}

/// Runs 4 workers of 8 slots on 50 keys × 100 jobs, each call sleeping 1–4 ms and failing
/// one time in ten (3 attempts allowed), with failed jobs holding their key or not. Checks
/// that no two calls of a key overlap and every job ended, and returns each key's calls in
/// the order they started. Empty when the broker keeps no ordering keys.
async fn run_keys(target: Target, hold: bool, name: &str) -> BTreeMap<u64, Vec<Span>> {
    let Target { broker, queue, .. } = target;
    if !broker.capabilities().ordered {
        skip_for(name, "ordered", "jobs of a key run one at a time");
        return BTreeMap::new();
    }
    let clock = match choose_clock(&broker) {
        true => Clock::tokio(),
        false => Clock::System,
    };
    for seq in 0..PER_KEY {
        let jobs = (0..KEYS)
            .map(|key| {
                NewJob::json(queue.as_str(), &(key * 1000 + seq))
                    .expect("JSON")
                    .ordering_key(format!("key-{key}"))
                    .max_attempts(3)
            })
            .collect();
        enqueue(&broker, jobs).await;
    }
    let spans = Arc::new(Mutex::new(BTreeMap::<u64, Vec<Span>>::new()));
    let running = Arc::new(Mutex::new(BTreeSet::<u64>::new()));
    let overlaps = Arc::new(AtomicU64::new(0));
    let policy = RetryPolicy {
        base: Duration::from_millis(5),
        cap: Duration::from_millis(20),
        factor: 2.0,
        jitter: 0.0,
        max_attempts: None,
    };
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let (spans, running) = (spans.clone(), running.clone());
            let overlaps = overlaps.clone();
            let rng = Arc::new(Mutex::new(fastrand::Rng::with_seed(w)));
            builder(&broker)
                .clock(clock)
                .retry(policy)
                .queue(
                    queue.clone(),
                    QueueOptions::new().concurrency(8).retries_hold_key(hold),
                    move |job: JobContext<u64>| {
                        let (spans, running) = (spans.clone(), running.clone());
                        let overlaps = overlaps.clone();
                        let (key, seq) = (job.payload / 1000, job.payload % 1000);
                        let attempt = job.job.attempt;
                        let (sleep, ok) = {
                            let mut rng = rng.lock().unwrap();
                            (rng.u64(1..=4), rng.u32(0..10) != 0)
                        };
                        async move {
                            if !running.lock().unwrap().insert(key) {
                                // A handler's panic would be a failed attempt: counted.
                                overlaps.fetch_add(1, Ordering::Relaxed);
                            }
                            let start = Instant::now();
                            tokio::time::sleep(Duration::from_millis(sleep)).await;
                            let end = Instant::now();
                            running.lock().unwrap().remove(&key);
                            let span = Span {
                                seq,
                                attempt,
                                start,
                                end,
                                ok,
                            };
                            spans.lock().unwrap().entry(key).or_default().push(span);
                            match ok {
                                true => Ok(()),
                                false => Err(JobError::retry("a random failure")),
                            }
                        }
                    },
                )
                .start()
                .expect("start")
        })
        .collect();
    let total = KEYS * PER_KEY;
    let ended = |s: &hopper_core::WorkerStats| s.completed + s.dead;
    let deadline = Instant::now() + super::PATIENCE;
    loop {
        let done: u64 = workers.iter().map(|w| ended(&w.stats())).sum();
        if done >= total {
            break;
        }
        assert!(Instant::now() < deadline, "{done} of {total} jobs ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut completed, mut dead) = (0, 0);
    for w in workers {
        let s = w.shutdown().await;
        (completed, dead) = (completed + s.completed, dead + s.dead);
    }
    assert_eq!(
        overlaps.load(Ordering::Relaxed),
        0,
        "calls that found their key running"
    );
    let mut spans = spans.lock().unwrap().clone();
    let mut died = 0;
    for (key, calls) in spans.iter_mut() {
        calls.sort_by_key(|s| s.start);
        for pair in calls.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                b.start >= a.end,
                "key {key}: job {} attempt {} started before job {} attempt {} ended",
                b.seq,
                b.attempt,
                a.seq,
                a.attempt
            );
        }
        assert_eq!(calls[0].seq, 0, "key {key} starts with its first job");
        let ended: BTreeSet<u64> = calls
            .iter()
            .filter(|s| s.ok || s.attempt == 3)
            .map(|s| s.seq)
            .collect();
        assert_eq!(ended.len() as u64, PER_KEY, "key {key}: jobs that ended");
        died += calls.iter().filter(|s| !s.ok && s.attempt == 3).count() as u64;
    }
    assert_eq!((completed + dead, dead), (total, died), "ended / dead");
    let left = counts(&broker, &queue).await;
    assert_eq!(
        (left.pending, left.scheduled, left.leased, left.dead),
        (0, 0, 0, dead),
        "pending / scheduled / leased / dead after the run"
    );
    spans
}
