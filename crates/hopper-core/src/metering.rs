//! What the broker trait itself counts through the `metrics` facade (enqueues), and
//! whether a recorder is there to count for; the worker's own metrics are in
//! `worker::metrics`, which reads brokers and so cannot be read by them.

use metrics::{Counter, counter};

use crate::job::NewJob;

/// Whether a recorder is installed here. The facade cannot say; the recorder it falls
/// back to without one is a zero-sized type, and real recorders keep state. A zero-sized
/// recorder of a program's own still gets every counter a worker registers, but not the
/// per-job histograms nor the enqueue counts.
pub(crate) fn recording() -> bool {
    metrics::with_recorder(|r| std::mem::size_of_val(r) != 0)
}

/// Jobs of one enqueue call by queue, counted once the broker accepted them.
#[derive(Debug)]
pub(crate) struct EnqueueCount(Vec<(Counter, u64)>);

impl EnqueueCount {
    /// Adds the jobs to `hopper_jobs_enqueued_total`.
    pub(crate) fn commit(self) {
        for (counter, n) in self.0 {
            counter.increment(n);
        }
    }
}

/// The counts one enqueue call adds, by runs of jobs of one queue (one run, usually).
/// Nothing is registered without a recorder: an enqueue of one job on the memory broker
/// takes about as long as building a labelled key would.
pub(crate) fn count_enqueued(broker: &'static str, jobs: &[NewJob]) -> EnqueueCount {
    if !recording() {
        return EnqueueCount(Vec::new());
    }
    let mut runs: Vec<(Counter, u64)> = Vec::new();
    let mut last: Option<&str> = None;
    for job in jobs {
        match (last, runs.last_mut()) {
            (Some(q), Some((_, n))) if q == job.queue => *n += 1,
            _ => {
                let labels = [("queue", job.queue.clone()), ("broker", broker.to_owned())];
                runs.push((counter!("hopper_jobs_enqueued_total", &labels), 1));
                last = Some(&job.queue);
            }
        }
    }
    EnqueueCount(runs)
}
