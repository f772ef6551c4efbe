//! Worker configuration: `WorkerBuilder::check` with fuzzed queue options (concurrency,
//! prefetch, batches, timeouts), worker settings and retry policy, over a broker stub of
//! any capabilities; and `RetryPolicy` on its own: `validate`, `delay`, `max_attempts_for`.
//!
//! Asserted, beyond no panic: `check` refuses only with a `ConfigError`, and never accepts
//! a retry policy that `validate` refuses; `validate` refuses a `base` or `cap` past
//! `MAX_DELAY` (100 years) by name; `delay` never panics, whatever the policy, and a valid
//! policy's delay never passes its cap; `max_attempts_for` only lowers.

#![no_main]

use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use async_trait::async_trait;
use hopper_core::job::MAX_DELAY;
use hopper_core::{
    Broker, CancelOutcome, Capabilities, CheckedJobs, Error, FetchRequest, Fetched, JobId,
    JobRecord, JobResult, LeaseId, Prefetch, QueueCounts, QueueOptions, Result, RetryPolicy,
    SettleReport, Settlement, Worker,
};
use libfuzzer_sys::fuzz_target;

/// A broker that only reports capabilities: `check` never calls anything else.
#[derive(Debug)]
struct Stub(Capabilities);

fn stub_err<T>() -> Result<T> {
    Err(Error::broker_msg("a fuzzing stub"))
}

#[async_trait]
impl Broker for Stub {
    fn capabilities(&self) -> Capabilities {
        self.0
    }
    async fn enqueue_checked(&self, _: CheckedJobs) -> Result<Vec<JobId>> {
        stub_err()
    }
    async fn fetch(&self, _: FetchRequest) -> Result<Fetched> {
        stub_err()
    }
    async fn settle(&self, _: Vec<Settlement>) -> Result<SettleReport> {
        stub_err()
    }
    async fn renew(&self, _: &[LeaseId], _: Duration) -> Result<Vec<LeaseId>> {
        stub_err()
    }
    async fn cancel(&self, _: JobId) -> Result<CancelOutcome> {
        stub_err()
    }
    async fn job(&self, _: JobId) -> Result<Option<JobRecord>> {
        stub_err()
    }
    async fn counts(&self, _: &str) -> Result<QueueCounts> {
        stub_err()
    }
    async fn dead_letters(&self, _: &str, _: usize) -> Result<Vec<JobRecord>> {
        stub_err()
    }
    async fn purge(&self, _: &str) -> Result<u64> {
        stub_err()
    }
}

#[derive(Debug, Arbitrary)]
enum Caps {
    LeasedSql,
    InProcess,
    Pushed,
    Custom { in_process: bool, leases: bool },
}

#[derive(Debug, Arbitrary)]
enum FuzzPrefetch {
    Default,
    Slots,
    Fixed(usize),
    Auto,
}

#[derive(Debug, Arbitrary)]
struct FuzzQueue {
    name: String,
    reuse_name: bool,
    batch_handler: bool,
    concurrency: Option<usize>,
    prefetch: FuzzPrefetch,
    max_batch: Option<usize>,
    pop_ahead: bool,
    batch: Option<(usize, u64)>,
    timeout: Option<u64>,
}

/// A retry delay: any, or near the 100-year limit where validation draws its line.
#[derive(Debug, Arbitrary)]
enum FuzzDelay {
    Any(u64, u32),
    NearMax(i32),
    Max,
}

impl FuzzDelay {
    fn get(&self) -> Duration {
        match *self {
            FuzzDelay::Any(secs, nanos) => Duration::new(secs, nanos % 1_000_000_000),
            FuzzDelay::NearMax(off) => {
                if off >= 0 {
                    MAX_DELAY + Duration::from_nanos(off as u64)
                } else {
                    MAX_DELAY - Duration::from_nanos(off.unsigned_abs().into())
                }
            }
            FuzzDelay::Max => Duration::MAX,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct FuzzRetry {
    base: FuzzDelay,
    cap: FuzzDelay,
    factor: f64,
    jitter: f64,
    max_attempts: Option<u32>,
    attempts: Vec<u32>,
    job_max: u32,
}

#[derive(Debug, Arbitrary)]
struct WorkerInput {
    caps: Caps,
    queues: Vec<FuzzQueue>,
    lease_ttl: Option<u64>,
    lease_renewal: bool,
    max_concurrency: Option<usize>,
    poll_interval: Option<u64>,
    settle_batch: Option<usize>,
    settle_delay: Option<u64>,
    grace: Option<u64>,
    retry: Option<FuzzRetry>,
}

fn worker(input: WorkerInput) {
    let caps = match input.caps {
        Caps::LeasedSql => Capabilities::leased_sql("stub"),
        Caps::InProcess => Capabilities::in_process("stub"),
        Caps::Pushed => Capabilities::pushed("stub"),
        Caps::Custom { in_process, leases } => {
            let mut c = Capabilities::leased_sql("stub");
            c.in_process = in_process;
            c.leases = leases;
            c
        }
    };
    let mut builder = Worker::builder(Arc::new(Stub(caps)));
    let mut last_name = String::from("q");
    for q in input.queues.iter().take(8) {
        let name = if q.reuse_name {
            last_name.clone()
        } else {
            q.name.clone()
        };
        last_name = name.clone();
        let mut o = QueueOptions::new().pop_ahead(q.pop_ahead);
        if let Some(c) = q.concurrency {
            o = o.concurrency(c);
        }
        o = match q.prefetch {
            FuzzPrefetch::Default => o,
            FuzzPrefetch::Slots => o.prefetch(Prefetch::Slots),
            FuzzPrefetch::Fixed(n) => o.prefetch(Prefetch::Fixed(n)),
            FuzzPrefetch::Auto => o.prefetch(Prefetch::Auto),
        };
        if let Some(m) = q.max_batch {
            o = o.max_batch(m);
        }
        if let Some((size, wait)) = q.batch {
            o = o.batch(size, Duration::from_millis(wait));
        }
        if let Some(t) = q.timeout {
            o = o.timeout(Duration::from_millis(t));
        }
        builder = if q.batch_handler {
            builder.batch_queue(
                name,
                o,
                |jobs: Vec<hopper_core::JobContext<serde_json::Value>>| async move {
                    jobs.iter().map(|_| JobResult::Ok(())).collect()
                },
            )
        } else {
            builder.queue(
                name,
                o,
                |_job: hopper_core::JobContext<serde_json::Value>| async { Ok(()) },
            )
        };
    }
    builder = builder.lease_renewal(input.lease_renewal);
    if let Some(ms) = input.lease_ttl {
        builder = builder.lease_ttl(Duration::from_millis(ms));
    }
    if let Some(n) = input.max_concurrency {
        builder = builder.max_concurrency(n);
    }
    if let Some(ms) = input.poll_interval {
        builder = builder.poll_interval(Duration::from_millis(ms));
    }
    if let Some(n) = input.settle_batch {
        builder = builder.settle_batch(n);
    }
    if let Some(ms) = input.settle_delay {
        builder = builder.settle_delay(Duration::from_millis(ms));
    }
    if let Some(ms) = input.grace {
        builder = builder.grace(Duration::from_millis(ms));
    }
    let mut policy_valid = true;
    if let Some(r) = &input.retry {
        let policy = RetryPolicy {
            base: r.base.get(),
            cap: r.cap.get(),
            factor: r.factor,
            jitter: r.jitter,
            max_attempts: r.max_attempts,
        };
        builder = builder.retry(policy);
        policy_valid = retry(&policy, r);
    }
    match builder.check() {
        Ok(()) => assert!(policy_valid, "check accepted a refused retry policy"),
        Err(Error::Config(e)) => {
            let _ = e.to_string();
        }
        Err(other) => panic!("check failed with a non-config error: {other:?}"),
    }
}

/// Checks `policy` on its own; returns whether it validates.
fn retry(policy: &RetryPolicy, r: &FuzzRetry) -> bool {
    let lowered = policy.max_attempts_for(r.job_max);
    assert!(lowered <= r.job_max);
    assert!(policy.max_attempts.is_none_or(|m| lowered <= m));
    // Never a panic, whatever the policy (a cap of `Duration::MAX` once made it panic).
    let delays: Vec<Duration> = r
        .attempts
        .iter()
        .take(8)
        .map(|&a| policy.delay(a))
        .collect();
    let valid = policy.validate();
    let factor_ok = policy.factor >= 1.0 && policy.factor.is_finite();
    let jitter_ok = (0.0..=1.0).contains(&policy.jitter);
    match &valid {
        Ok(()) => {
            assert!(factor_ok && jitter_ok, "{policy:?}");
            assert!(
                policy.base <= MAX_DELAY && policy.cap <= MAX_DELAY,
                "{policy:?}"
            );
            assert_ne!(policy.max_attempts, Some(0));
            for (&attempt, d) in r.attempts.iter().zip(&delays) {
                assert!(*d <= policy.cap, "{policy:?} attempt {attempt}: {d:?}");
            }
        }
        Err(e) => {
            assert!(e.setting.starts_with("retry."), "{e}");
            // Past 100 years, `base` and `cap` are refused by name.
            if factor_ok && jitter_ok {
                if policy.base > MAX_DELAY {
                    assert_eq!(e.setting, "retry.base", "{policy:?}");
                } else if policy.cap > MAX_DELAY {
                    assert_eq!(e.setting, "retry.cap", "{policy:?}");
                }
            }
        }
    }
    valid.is_ok()
}

fuzz_target!(|input: WorkerInput| worker(input));
