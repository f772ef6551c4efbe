//! What the broker trait itself counts through the `metrics` facade (enqueues), and
//! whether a recorder is there to count for; the worker's own metrics are in
//! `worker::metrics`, which reads brokers and so cannot be read by them.

use metrics::{Counter, counter};

use crate::job::{Enqueued, NewJob};

/// Whether a recorder is installed here. The facade cannot say; the recorder it falls
/// back to without one is a zero-sized type, and real recorders keep state. A zero-sized
/// recorder of a program's own still gets every counter a worker registers, but not the
/// per-job histograms nor the enqueue counts.
pub(crate) fn recording() -> bool {
    metrics::with_recorder(|r| std::mem::size_of_val(r) != 0)
}

/// Jobs of one enqueue call by queue: each run of jobs of one queue, with where it ends in
/// the call, counted once the broker accepted them.
#[derive(Debug)]
pub(crate) struct EnqueueCount(Vec<(Counter, usize)>);

impl EnqueueCount {
    /// Adds the jobs the broker stored to `hopper_jobs_enqueued_total`: duplicates of a
    /// unique key were not enqueued.
    pub(crate) fn commit(self, done: &[Enqueued]) {
        let mut start = 0;
        for (counter, end) in self.0 {
            let stored = done.get(start..end).unwrap_or_default();
            counter.increment(stored.iter().filter(|e| !e.existing).count() as u64);
            start = end;
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
    let mut runs: Vec<(Counter, usize)> = Vec::new();
    let mut last: Option<&str> = None;
    for (i, job) in jobs.iter().enumerate() {
        match (last, runs.last_mut()) {
            (Some(q), Some((_, end))) if q == job.queue => *end = i + 1,
            _ => {
                let labels = [("queue", job.queue.clone()), ("broker", broker.to_owned())];
                runs.push((counter!("hopper_jobs_enqueued_total", &labels), i + 1));
                last = Some(&job.queue);
            }
        }
    }
    EnqueueCount(runs)
}
