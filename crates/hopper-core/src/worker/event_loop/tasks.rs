//! The pool as the event loop sees it: which tasks are alive, which are idle and since
//! when, what each one is working on, and the hand-offs running on the loop's own task.
//! The pool starts with one idle task, grows on demand up to its limit, and shrinks back
//! to one idle task once the others have idled for [`POOL_KEEP_ALIVE`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::worker::POOL_KEEP_ALIVE;
use crate::worker::pool::{self, Done, Handoff, PoolContext, Started, Work};
use crate::worker::stats::WorkerStats;

/// What an inline hand-off returns: the pool task whose slot it ran in, what finished and
/// how long it took.
pub(super) type InlineRan = (usize, (Vec<Done>, Duration));
/// Work running on the event loop's own task (see `dispatch`'s `INLINE_POLL_LIMIT`).
type InlineWork = Pin<Box<dyn Future<Output = InlineRan> + Send>>;

/// Finished hand-offs kept for reuse, at most: one per task of a large pool.
const SPARE_HANDOFFS: usize = 64;

/// What a pool task is working on, as the loop keeps track of it.
pub(super) enum TaskWork {
    Jobs(Arc<Handoff>),
    Batch { queue: usize, held: Vec<Started> },
}

impl TaskWork {
    pub(super) fn queue(&self) -> usize {
        match self {
            TaskWork::Jobs(h) => h.queue,
            TaskWork::Batch { queue, .. } => *queue,
        }
    }
}

/// A pool task: it runs one piece of work at a time, given to it over `tx`, or, for one
/// brief job, lends its slot to that job run on the event loop's own task.
struct Task {
    tx: mpsc::UnboundedSender<Work>,
    join: JoinHandle<()>,
    work: Option<TaskWork>,
}

pub(super) struct Tasks {
    pub(super) ctx: Arc<PoolContext>,
    slots: Vec<Option<Task>>,
    /// Idle tasks and since when, the longest idle first; the last one idle is given work
    /// first, so the others can reach [`POOL_KEEP_ALIVE`] and end.
    idle: Vec<(usize, Instant)>,
    /// Pool tasks spawned since the start.
    started: u64,
    live: usize,
    pub(super) limit: usize,
    /// Hand-offs running on the loop's own task.
    pub(super) inline: FuturesUnordered<InlineWork>,
    /// The hand-offs that were running on the loop's task when the grace period ended, to
    /// drop once the stats lock is released (a handler's drop may read the stats).
    abandoned_inline: FuturesUnordered<InlineWork>,
    /// Finished hand-offs and their results buffers, for the next hand-offs to reuse.
    spare: Vec<(Arc<Handoff>, Vec<Done>)>,
}

impl Tasks {
    pub(super) fn new(ctx: Arc<PoolContext>, limit: usize) -> Self {
        Tasks {
            ctx,
            slots: Vec::new(),
            idle: Vec::new(),
            started: 0,
            live: 0,
            limit,
            inline: FuturesUnordered::new(),
            abandoned_inline: FuturesUnordered::new(),
            spare: Vec::new(),
        }
    }

    /// An idle task can take work, or a new one may be spawned.
    #[inline]
    pub(super) fn available(&self) -> bool {
        !self.idle.is_empty() || self.live < self.limit
    }

    #[inline]
    pub(super) fn all_idle(&self) -> bool {
        self.idle.len() == self.live
    }

    pub(super) fn spawn(&mut self) -> usize {
        let (tx, rx) = mpsc::unbounded_channel();
        let index = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let join = tokio::spawn(pool::run_task(index, self.ctx.clone(), rx));
        self.slots[index] = Some(Task {
            tx,
            join,
            work: None,
        });
        self.live += 1;
        self.started += 1;
        self.idle.push((index, Instant::now()));
        index
    }

    /// Gives `work` to an idle task (a new one if none is idle), to run on the event
    /// loop's own task in that task's slot if `inline`.
    #[inline]
    pub(super) fn give(&mut self, work: Work, record: TaskWork, inline: bool) {
        let index = match self.idle.pop() {
            Some((i, _)) => i,
            None => {
                let index = self.spawn();
                self.idle.pop();
                index
            }
        };
        let task = self.slots[index].as_mut().expect("idle tasks are alive");
        task.work = Some(record);
        if inline {
            let ctx = self.ctx.clone();
            self.inline.push(Box::pin(async move {
                (index, pool::run_work(&ctx, work).await)
            }));
            return;
        }
        // A send fails only if the task died, which it does only when aborted at shutdown.
        let _ = task.tx.send(work);
    }

    /// A task reported back: it is idle again. Returns what it was working on, or `None`
    /// for a task abandoned at the end of the grace period (its jobs were released).
    #[inline]
    pub(super) fn finish(&mut self, task: usize) -> Option<TaskWork> {
        let work = self.slots.get_mut(task)?.as_mut()?.work.take()?;
        self.idle.push((task, Instant::now()));
        Some(work)
    }

    /// What every busy task is working on.
    pub(super) fn working(&self) -> impl Iterator<Item = &TaskWork> {
        self.slots.iter().flatten().filter_map(|t| t.work.as_ref())
    }

    /// Ends the tasks idle for [`POOL_KEEP_ALIVE`], keeping one idle task.
    pub(super) fn shrink(&mut self, now: Instant) {
        let expired = self
            .idle
            .iter()
            .take_while(|(_, since)| *since + POOL_KEEP_ALIVE <= now)
            .count()
            .min(self.idle.len().saturating_sub(1));
        for (index, _) in self.idle.drain(..expired) {
            self.slots[index] = None;
            self.live -= 1;
        }
    }

    /// When the longest-idle task may end, if it is not the last idle one.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        match self.idle.as_slice() {
            [(_, longest), _, ..] => Some(*longest + POOL_KEEP_ALIVE),
            _ => None,
        }
    }

    /// Stops every busy task where it is and returns what each was working on. The
    /// hand-offs on the loop's own task stop too: their futures are dropped by
    /// [`drop_abandoned`](Self::drop_abandoned), after the pass.
    pub(super) fn abandon(&mut self) -> Vec<TaskWork> {
        self.abandoned_inline = std::mem::take(&mut self.inline);
        let mut out = Vec::new();
        for slot in &mut self.slots {
            let Some(work) = slot.as_mut().and_then(|t| t.work.take()) else {
                continue;
            };
            if let Some(task) = slot.take() {
                task.join.abort();
            }
            self.live -= 1;
            out.push(work);
        }
        out
    }

    /// Drops the hand-offs abandoned on the loop's own task; called without the stats lock.
    pub(super) fn drop_abandoned(&mut self) {
        if !self.abandoned_inline.is_empty() {
            self.abandoned_inline = FuturesUnordered::new();
        }
    }

    /// Ends every task (dropping a task's sender ends it).
    pub(super) fn end_all(&mut self) {
        self.slots.clear();
    }

    /// A finished hand-off and its results buffer to reuse, or new ones.
    #[inline]
    pub(super) fn spare(&mut self) -> (Arc<Handoff>, Vec<Done>) {
        self.spare.pop().unwrap_or_default()
    }

    /// Keeps a finished hand-off for reuse, if the task has dropped its share of it.
    #[inline]
    pub(super) fn keep_spare(&mut self, mut handoff: Arc<Handoff>, done: Vec<Done>) {
        if self.spare.len() < SPARE_HANDOFFS && Arc::get_mut(&mut handoff).is_some() {
            self.spare.push((handoff, done));
        }
    }

    /// Records the pool's size in the stats.
    pub(super) fn record(&self, st: &mut WorkerStats) {
        // Every live task is idle or working.
        st.running = self.live - self.idle.len();
        st.pool_tasks = self.live;
        st.idle_tasks = self.idle.len();
        st.peak_pool_tasks = st.peak_pool_tasks.max(self.live);
        st.pool_tasks_started = self.started;
    }
}
