//! The worker-level suite: what a real [`Worker`] does on each broker, from enqueue to
//! settlement, retries, dead letters, stops, crashes, batches, pauses and cancels.
//!
//! Each case takes a [`Target`]: a fresh broker, a way to open another broker on the same
//! store (as another process would), and a queue name no other test uses at the same time.
//! [`worker_suite!`](crate::worker_suite) runs each case as a test of its own on a
//! current-thread runtime in real time, and the case picks its clock:
//!
//! - on an in-process broker ([`Capabilities::in_process`]) it pauses tokio's clock, so
//!   backoffs, lease expiry and batch waits are exact and instant;
//! - on any other broker it stays in real time with short delays. There the store keeps time
//!   (the database's clock for leases and `run_at`, RabbitMQ's TTL for retry queues), and a
//!   paused clock would auto-advance whenever the runtime waits on the server's reply,
//!   running virtual seconds ahead in each round trip and expiring leases that are alive.
//!
//! No case asserts how fast anything ran: they count runs, attempts, batch sizes and
//! settlements, and every wait is bounded by a generous timeout. A case a broker cannot
//! support prints `skipped: <case>: needs Capabilities::<field> ...` and passes.
//!
//! [`Capabilities::in_process`]: hopper_core::Capabilities::in_process

mod batch;
mod control;
mod groups;
mod ordering;
mod periodic;
mod rate;
mod run;
mod stop;

pub use batch::batch_sizes;
pub use control::{cancel_before_start, pause_and_resume, worker_listed_while_running};
pub use groups::group_completes_once;
pub use ordering::{ordered_keys_run_in_order, ordered_retries_step_aside_in_workers};
pub use periodic::periodic_slots_enqueued_once;
pub use rate::{rate_limit_holds_across_workers, rate_limit_per_key_holds_across_workers};
pub use run::{
    dead_letter_after_max_attempts, enqueue_run_ack, retry_backoff_then_success,
    snoozed_job_is_not_charged,
};
pub use stop::{crash_charges_the_attempt, crashed_worker_jobs_run_again, release_at_shutdown};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Broker, JobContext, JobId, QueueCounts, Worker, WorkerBuilder, WorkerStats};
use tokio::time::Instant;

use crate::workers::Connect;

/// What a worker case runs against.
pub struct Target {
    /// A fresh broker: an empty store (or, on RabbitMQ, queues no other test uses).
    pub broker: Arc<dyn Broker>,
    /// Opens another broker on the same store, with connections of its own; the crash
    /// cases run the doomed worker on it. An in-process broker may return `broker` again.
    pub connect: Connect,
    /// The queue the case works; on a shared server, a name of this test's own.
    pub queue: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("broker", &self.broker)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// How long a case waits for anything before it fails.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The worker's idle poll in these cases: a backstop for a lost wake-up, short so a real
/// time case never waits the default second for one.
const POLL: Duration = Duration::from_millis(50);

/// Pauses tokio's clock if `broker` is in process (see the module docs); returns whether
/// it did. Must run on a current-thread runtime whose clock is not paused yet.
fn choose_clock(broker: &Arc<dyn Broker>) -> bool {
    let in_process = broker.capabilities().in_process;
    if in_process {
        tokio::time::pause();
    }
    in_process
}

/// Prints the skip line naming the capability `case` needs.
fn skip_for(case: &str, capability: &str, why: &str) {
    crate::helpers::skip(case, &format!("needs Capabilities::{capability}: {why}"));
}

/// A worker builder on `broker` with the cases' short idle poll.
fn builder(broker: &Arc<dyn Broker>) -> WorkerBuilder {
    Worker::builder(broker.clone()).poll_interval(POLL)
}

/// Waits, polling every 5 ms up to [`PATIENCE`], until `done` holds for the worker's
/// statistics, and returns them.
async fn wait_for(worker: &Worker, what: &str, done: impl Fn(&WorkerStats) -> bool) -> WorkerStats {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let s = worker.stats();
        if done(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "waited {PATIENCE:?} for {what}; completed {} retried {} dead {} released {} \
             cancelled {} running {} buffered {}",
            s.completed,
            s.retried,
            s.dead,
            s.released,
            s.cancelled,
            s.running,
            s.buffered
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `broker.counts(queue)`, panicking with the queue on error.
async fn counts(broker: &Arc<dyn Broker>, queue: &str) -> QueueCounts {
    broker
        .counts(queue)
        .await
        .unwrap_or_else(|e| panic!("counts(`{queue}`) failed: {e:?}"))
}

/// One handler call: which job (by payload index), its id and attempt, and when it started
/// on tokio's clock.
#[derive(Debug, Clone, Copy)]
struct Run {
    payload: u64,
    id: JobId,
    attempt: u32,
    at: Instant,
}

/// Every handler call of a case, in the order they started.
#[derive(Debug, Clone, Default)]
struct Runs(Arc<Mutex<Vec<Run>>>);

impl Runs {
    fn record(&self, job: &JobContext<u64>) {
        self.0.lock().unwrap().push(Run {
            payload: job.payload,
            id: job.job.id,
            attempt: job.job.attempt,
            at: Instant::now(),
        });
    }

    fn all(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    /// The attempts each payload ran with, in order.
    fn attempts(&self) -> BTreeMap<u64, Vec<u32>> {
        let mut by = BTreeMap::<u64, Vec<u32>>::new();
        for r in self.all() {
            by.entry(r.payload).or_default().push(r.attempt);
        }
        by
    }
}

/// A gate handlers wait on until the case opens it.
#[derive(Debug, Clone)]
struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    fn new() -> Self {
        Gate(Arc::new(tokio::sync::watch::channel(false).0))
    }

    fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }
}
