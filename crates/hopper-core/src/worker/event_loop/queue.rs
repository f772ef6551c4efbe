//! One queue as the event loop sees it: its buffer, what it has out with pool tasks, and
//! the flags that say whether to fetch for it and hand its jobs out.

use std::collections::VecDeque;

use tokio::time::Instant;

use crate::job::Job;
use crate::prefetch::{AutoSizer, Prefetch};
use crate::worker::QueueOptions;
use crate::worker::metrics::QueueMeters;
use crate::worker::stats::{QueueStats, WorkerStats};

pub(super) struct QueueState {
    pub(super) name: String,
    /// This queue's metric handles.
    pub(super) meters: QueueMeters,
    pub(super) opts: QueueOptions,
    pub(super) buffer: VecDeque<Job>,
    /// Pool tasks working on this queue.
    pub(super) busy: usize,
    /// Jobs handed to tasks and not reported back (waiting or running).
    pub(super) in_handoffs: usize,
    pub(super) sizer: Option<AutoSizer>,
    pub(super) paused: bool,
    /// The last fetch came back short: wait for a wake-up, a due job or the poll.
    pub(super) drained: bool,
    pub(super) seen_priority: bool,
    /// When the batch now collecting got its first job.
    pub(super) batch_since: Option<Instant>,
    /// Since when a top-up of this queue (see [`Intake::top_up`](super::intake::Intake))
    /// has been held back.
    pub(super) top_up_since: Option<Instant>,
    /// Pushed brokers: the window last asked for with `subscribe` (`Some(None)`: the
    /// broker's default), or `None` while there is no subscription.
    pub(super) window_sent: Option<Option<u32>>,
    /// Pushed brokers: a `subscribe` or `unsubscribe` is in flight.
    pub(super) subscribing: bool,
    /// Pushed brokers: the subscription has been opened (its first `subscribe` returned).
    /// No fetch before: a fetch would open one itself, under the broker's default window.
    pub(super) subscribed: bool,
    /// Settlements of this queue's jobs not yet applied by the broker. On a pushed broker
    /// they still count against the window, so the Auto rule needs them to tell a full
    /// window from a short one.
    pub(super) settling: usize,
    /// Settlements of this queue applied since its last take from a pushed subscription:
    /// their replacements are still on the way from the server, so the window is still in
    /// use for them (see `size_pushed_windows`).
    pub(super) freed_since_take: usize,
    /// Jobs asked of this queue by fetches in flight.
    pub(super) asked: usize,
    /// The last fetch answered for this queue brought all it asked: there is a backlog,
    /// and a queue that fetches ahead may send a fetch beside one in flight.
    pub(super) full: bool,
    /// The number of the latest fetch sent for this queue.
    pub(super) last_sent: u64,
    /// The sizes of this queue's fetches since the heartbeat's last report (the first
    /// [`FETCHES_PER_REPORT`](crate::registry::FETCHES_PER_REPORT)).
    pub(super) unreported: Vec<u32>,
}

impl QueueState {
    pub(super) fn new(name: String, opts: QueueOptions, broker: &'static str) -> Self {
        QueueState {
            meters: QueueMeters::new(&name, broker),
            sizer: (opts.prefetch == Some(Prefetch::Auto)).then(AutoSizer::default),
            name,
            opts,
            buffer: VecDeque::new(),
            busy: 0,
            in_handoffs: 0,
            paused: false,
            drained: false,
            seen_priority: false,
            batch_since: None,
            top_up_since: None,
            window_sent: None,
            subscribing: false,
            subscribed: false,
            settling: 0,
            freed_since_take: 0,
            asked: 0,
            full: false,
            last_sent: 0,
            unreported: Vec::new(),
        }
    }

    /// Jobs a slot takes at once: a batch handler's batch size, else one.
    #[inline]
    pub(super) fn per_slot(&self) -> usize {
        self.opts.batch.map_or(1, |(size, _)| size)
    }

    /// Jobs held and not started: buffered, or waiting in a hand-off.
    #[inline]
    pub(super) fn waiting(&self) -> usize {
        self.buffer.len() + self.in_handoffs - self.busy.min(self.in_handoffs)
    }

    /// Takes a fetched job into the buffer.
    #[inline]
    pub(super) fn take_in(&mut self, job: Job, now: Instant) {
        if job.priority != 0 {
            self.seen_priority = true;
        }
        if self.buffer.is_empty() {
            self.batch_since = Some(now);
        }
        self.buffer.push_back(job);
    }

    /// Takes a whole fetch of this queue into the buffer in one move.
    #[inline]
    pub(super) fn take_in_all(&mut self, jobs: Vec<Job>, now: Instant) {
        self.seen_priority |= jobs.iter().any(|j| j.priority != 0);
        if self.buffer.is_empty() {
            self.batch_since = Some(now);
        }
        self.buffer.append(&mut VecDeque::from(jobs));
    }
}

/// The figures of queue `name`, created on first use; the name is copied only then.
pub(super) fn queue_stats<'a>(st: &'a mut WorkerStats, name: &str) -> &'a mut QueueStats {
    if !st.queues.contains_key(name) {
        st.queues.insert(name.to_owned(), QueueStats::default());
    }
    st.queues.get_mut(name).expect("inserted above")
}
