//! Commands from the running [`Worker`](crate::worker::Worker): pause, resume, cancel a
//! job not yet started, count what is held, report for the heartbeat, and stop.

use super::tasks::TaskWork;
use super::{Command, EventLoop};
use crate::broker::Outcome;
use crate::error::{ConfigError, Error, Result};
use crate::job::JobId;
use crate::registry::QueueBeat;
use crate::worker::stats::WorkerStats;

impl EventLoop {
    pub(super) fn command(&mut self, cmd: Command, st: &mut WorkerStats) {
        match cmd {
            Command::Pause(name, reply) => {
                let r = self.queue_index(&name).map(|qi| {
                    self.queues[qi].paused = true;
                    self.release_unstarted(Some(qi), st);
                    self.unsubscribe_paused(qi);
                });
                let _ = reply.send(r);
            }
            Command::Resume(name, reply) => {
                let r = self.queue_index(&name).map(|qi| {
                    let q = &mut self.queues[qi];
                    q.paused = false;
                    q.drained = false;
                });
                let _ = reply.send(r);
            }
            Command::Cancel(id, reply) => {
                let _ = reply.send(self.cancel(id, st));
            }
            Command::Counts(name, reply) => {
                let _ = reply.send(self.queue_index(&name).map(|qi| self.held(qi)));
            }
            Command::Report(reply) => {
                let _ = reply.send(self.report());
            }
            Command::Shutdown(grace, reply) => self.begin_stop(grace, reply, st),
        }
    }

    /// What the heartbeat reports of each queue: slots, what is held and running, window.
    fn report(&mut self) -> Vec<QueueBeat> {
        let lease = self.leases.earliest_expiry();
        let lease_expires_at = lease.map(|at| self.wall.at(at));
        let mut beats = Vec::with_capacity(self.queues.len());
        for qi in 0..self.queues.len() {
            let (waiting, running) = self.held(qi);
            let fetches = std::mem::take(&mut self.queues[qi].unreported);
            let q = &self.queues[qi];
            beats.push(QueueBeat {
                queue: q.name.clone(),
                concurrency: q.opts.concurrency,
                held: (waiting + running) as usize,
                running: running as usize,
                window: self.window(q),
                paused: q.paused,
                fetches,
                lease_expires_at,
            });
        }
        beats
    }

    /// Cancels job `id` if it is buffered here or waiting in a hand-off; returns whether it
    /// was.
    fn cancel(&mut self, id: JobId, st: &mut WorkerStats) -> bool {
        let mut found = None;
        for q in &mut self.queues {
            if let Some(at) = q.buffer.iter().position(|j| j.id == id) {
                found = q.buffer.remove(at);
                break;
            }
        }
        if found.is_none() {
            for work in self.tasks.working() {
                if let TaskWork::Jobs(h) = work {
                    if let Some(job) = h.take_waiting(id) {
                        self.queues[h.queue].in_handoffs -= 1;
                        found = Some(job);
                        break;
                    }
                }
            }
        }
        let Some(job) = found else {
            return false;
        };
        let qi = self.queue_of(&job.queue);
        self.settle_and_count(job.id, job.lease, Outcome::Cancel, qi, st);
        true
    }

    /// Jobs of queue `qi` held here: (not started, running).
    fn held(&self, qi: usize) -> (u64, u64) {
        let mut pending = self.queues[qi].buffer.len() as u64;
        let mut processing = 0u64;
        for work in self.tasks.working() {
            match work {
                TaskWork::Jobs(h) if h.queue == qi => {
                    let (waiting, running) = h.load();
                    pending += waiting as u64;
                    processing += running as u64;
                }
                TaskWork::Batch { queue, held } if *queue == qi => {
                    processing += held.len() as u64;
                }
                _ => {}
            }
        }
        (pending, processing)
    }

    fn queue_index(&self, name: &str) -> Result<usize> {
        self.by_name.get(name).copied().ok_or_else(|| {
            Error::Config(ConfigError::new(
                "queue",
                name,
                format!(
                    "one of the queues this worker works: {}",
                    self.queues
                        .iter()
                        .map(|q| q.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        })
    }
}

/// The loop of a worker with schedules and no queue: nothing to fetch or run, so it only
/// answers commands, until told to stop.
pub(crate) async fn without_queues(mut rx: tokio::sync::mpsc::UnboundedReceiver<super::Event>) {
    fn none<T>(name: String) -> Result<T> {
        Err(Error::Config(ConfigError::new(
            "queue",
            name,
            "a queue this worker works: it has none, only schedules",
        )))
    }
    while let Some(event) = rx.recv().await {
        let super::Event::Command(cmd) = event else {
            continue;
        };
        match cmd {
            Command::Pause(name, reply) | Command::Resume(name, reply) => {
                let _ = reply.send(none(name));
            }
            Command::Counts(name, reply) => {
                let _ = reply.send(none(name));
            }
            Command::Cancel(_, reply) => {
                let _ = reply.send(false);
            }
            Command::Report(reply) => {
                let _ = reply.send(Vec::new());
            }
            Command::Shutdown(_, reply) => {
                let _ = reply.send(());
                return;
            }
        }
    }
}
