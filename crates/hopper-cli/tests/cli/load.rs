//! `hopper load` on the memory broker and on SQLite: every job once, fetches sized by
//! the flags, a prefilled backlog drained in place.

use crate::support::{assert_each_ran_once, load_json, sizes, sqlite_url};

/// The drain ends when every job's work is done, not when the last one started: 20 jobs
/// of 300 ms at concurrency 10 are two rounds, so the drain cannot be shorter than 600 ms
/// (a lower bound the sleeps guarantee, not a speed claim), and none is handed back
/// unfinished at the end.
#[test]
fn load_waits_for_every_job_to_finish() {
    let r = load_json(&[
        "load",
        "--broker",
        "memory://",
        "--jobs",
        "20",
        "--job-ms",
        "300",
        "--concurrency",
        "10",
        "--json",
    ]);
    assert_eq!(r["completed"], 20);
    assert_eq!(r["lost"], 0);
    let drain = r["drain_s"].as_f64().unwrap();
    assert!(drain >= 0.6, "drained in {drain} s");
}

#[test]
fn load_on_memory_runs_every_job_once() {
    let r = load_json(&[
        "load",
        "--broker",
        "memory://",
        "--jobs",
        "20000",
        "--concurrency",
        "8",
        "--json",
    ]);
    assert_each_ran_once(&r, 20000);
    let s = sizes(&r);
    assert_eq!(s.iter().sum::<u64>(), 20000);
    assert!(s.iter().all(|&n| n <= 50), "max_batch 50 caps every fetch");
    for key in ["enqueue_s", "drain_s", "jobs_per_s", "jobs_per_fetch"] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key}");
    }
    assert!(
        r["inline_handoffs"].is_u64(),
        "the report counts inline hand-offs"
    );
    assert!(r["latency_ms"]["p99"].as_f64().unwrap() >= r["latency_ms"]["p50"].as_f64().unwrap());
}

#[test]
fn load_on_sqlite_with_two_workers_loses_nothing_and_claims_by_slots() {
    let (url, dir) = sqlite_url("two-workers");
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "5000",
        "--workers",
        "2",
        "--concurrency",
        "10",
        "--queues",
        "a,b",
        "--prefetch",
        "slots",
        "--json",
    ]);
    std::fs::remove_dir_all(dir).ok();
    assert_each_ran_once(&r, 5000);
    assert_eq!(r["workers"], 2);
    // Two queues at concurrency 10 each, by slots: a fetch holds at most 20 jobs.
    assert!(sizes(&r).iter().all(|&n| n <= 20), "{:?}", sizes(&r));
    // Both workers' fetches: one size per fetch counted, adding up to every job.
    assert_eq!(sizes(&r).len() as u64, r["fetches"].as_u64().unwrap());
    assert_eq!(sizes(&r).iter().sum::<u64>(), 5000);
}

#[test]
fn load_with_a_batch_handler_and_auto_prefetch() {
    let (url, dir) = sqlite_url("batch");
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "2000",
        "--concurrency",
        "2",
        "--batch",
        "25",
        "--prefetch",
        "100",
        "--max-batch",
        "100",
        "--json",
    ]);
    assert_eq!(r["completed"], 2000);
    assert!(sizes(&r).iter().all(|&n| n <= 100));
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "100",
        "--job-ms",
        "10",
        "--concurrency",
        "1",
        "--prefetch",
        "auto",
        "--json",
    ]);
    std::fs::remove_dir_all(dir).ok();
    // 10 ms jobs: a fetch's round trip is short against a fetch's work, so Auto keeps one
    // fetch at a time and its sizes are exactly its rule's.
    assert_eq!(r["completed"], 100);
    let s = sizes(&r);
    assert_eq!(
        &s[..4],
        &[1, 1, 2, 2],
        "auto starts small and doubles: {s:?}"
    );
    assert!(s.iter().all(|&n| n <= 16));
}

/// `--prefilled` drains a backlog already in the queue, as `hopper bench` leaves one for a
/// raw baseline: nothing is purged or enqueued, every job runs once, and a queue the run
/// does not name keeps its jobs.
#[test]
fn load_prefilled_drains_the_backlog_in_place() {
    let (url, dir) = sqlite_url("prefilled");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(async {
        let broker = hopper::connect(&url).await.unwrap();
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let backlog = (0..300usize)
            .map(|i| hopper::NewJob::json("pre", &(i, now_us)).unwrap())
            .collect();
        broker.enqueue(backlog).await.unwrap();
        let other = (0..5usize)
            .map(|i| hopper::NewJob::json("other", &(i, now_us)).unwrap())
            .collect();
        broker.enqueue(other).await.unwrap();
        broker
    });
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "300",
        "--queues",
        "pre",
        "--prefilled",
        "--json",
    ]);
    assert_each_ran_once(&r, 300);
    assert_eq!(r["enqueue_s"].as_f64(), Some(0.0));
    let (pre, other) = rt.block_on(async {
        (
            broker.counts("pre").await.unwrap(),
            broker.counts("other").await.unwrap(),
        )
    });
    assert_eq!((pre.pending, pre.leased), (0, 0));
    assert_eq!(other.pending, 5);
    drop(broker);
    std::fs::remove_dir_all(dir).ok();
}

/// `--rate`: the jobs arrive at that rate while the workers run, so 300 at 1,000 a second
/// take at least 0.29 s to enqueue (a lower bound the pacing guarantees), every one runs
/// once, and each waits in the queue only as long as the worker needs to take it.
#[test]
fn load_at_a_steady_rate_enqueues_while_the_workers_run() {
    let (url, _dir) = sqlite_url("steady");
    let r = load_json(&[
        "load", "--broker", &url, "--jobs", "300", "--rate", "1000", "--json",
    ]);
    assert_each_ran_once(&r, 300);
    let enqueue = r["enqueue_s"].as_f64().unwrap();
    assert!(enqueue >= 0.29, "enqueued in {enqueue} s");
    let lat = &r["latency_ms"];
    assert!(lat["max"].as_f64().unwrap() >= lat["p99"].as_f64().unwrap());
}

/// A load never destroys jobs it did not make: a queue holding an application's scheduled
/// job and dead letter is refused, named with its counts, and left as it was; with
/// `--purge-first` the run empties it and goes ahead.
#[test]
fn load_refuses_a_queue_holding_jobs_unless_told_to_purge_it() {
    use hopper::broker::{FetchRequest, Outcome, Settlement};
    use std::time::Duration;

    let (url, dir) = sqlite_url("refuse");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(async {
        let broker = hopper::connect(&url).await.unwrap();
        let later = hopper::NewJob::new("app", "later").delay(Duration::from_secs(3600));
        let dead = hopper::NewJob::new("app", "dead").max_attempts(1);
        broker.enqueue(vec![later, dead]).await.unwrap();
        let fetched = broker
            .fetch(FetchRequest::one("app", 1, Duration::from_secs(30)))
            .await
            .unwrap();
        let job = &fetched.jobs[0];
        let dead = Settlement {
            job: job.id,
            lease: job.lease,
            outcome: Outcome::DeadLetter {
                error: "failed".to_owned(),
            },
        };
        broker.settle(vec![dead]).await.unwrap();
        broker
    });
    let load = |extra: &[&str]| {
        let mut args = vec!["load", "--broker", &url, "--queues", "app", "--jobs", "50"];
        args.extend_from_slice(extra);
        crate::support::hopper(&args)
    };
    let out = load(&[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid queues `app (2 jobs: 0 pending, 1 scheduled, 0 leased, 1 dead)`"),
        "{err}"
    );
    assert!(err.contains("--purge-first"), "{err}");
    let kept = rt.block_on(broker.counts("app")).unwrap();
    assert_eq!(
        (kept.scheduled, kept.dead),
        (1, 1),
        "the refusal changed the queue"
    );

    let out = load(&["--purge-first", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_each_ran_once(&r, 50);
    std::fs::remove_dir_all(dir).ok();
}
