//! [`Worker`]: a running worker, steered from outside its event loop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::event_loop::{self, Command};
use super::heartbeat::Heartbeat;
use super::periodic::{self, Periodic};
use super::stats::WorkerStats;
use super::{QueueSpec, WorkerConfig};
use crate::broker::{Broker, CancelOutcome};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::schedule::Schedule;

/// What this worker holds of a queue, and what its broker holds pending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerCounts {
    /// Not started: in the broker, in this worker's buffer, or waiting in a hand-off.
    pub pending: u64,
    /// Running in this worker now.
    pub processing: u64,
}

/// Steers a running worker. Dropping it leaves the worker running; call
/// [`shutdown`](Worker::shutdown) to stop it gracefully.
#[derive(Debug)]
pub struct Worker {
    broker: Arc<dyn Broker>,
    tx: mpsc::UnboundedSender<event_loop::Event>,
    stats: Arc<Mutex<WorkerStats>>,
    join: Option<tokio::task::JoinHandle<()>>,
    /// The heartbeat task, on brokers that list workers, and the periodic jobs' task, with
    /// schedules; they end after the event loop.
    beside: Vec<tokio::task::JoinHandle<()>>,
}

impl Worker {
    /// Starts the event loop of a checked worker on the current tokio runtime.
    pub(super) fn run(
        broker: Arc<dyn Broker>,
        queues: Vec<QueueSpec>,
        schedules: Vec<Schedule>,
        config: WorkerConfig,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Mutex::new(WorkerStats::default()));
        let beats = Arc::new(Mutex::new(periodic::first_beats(&schedules)));
        let heartbeat = config
            .heartbeat
            .filter(|_| broker.capabilities().admin.workers)
            .map(|every| Heartbeat {
                broker: broker.clone(),
                stats: stats.clone(),
                events: tx.clone(),
                every,
                queues: queues.iter().map(|q| q.name.clone()).collect(),
                schedules: beats.clone(),
            });
        let periodic = (!schedules.is_empty()).then(|| Periodic {
            broker: broker.clone(),
            schedules,
            clock: config.clock,
            stats: stats.clone(),
            beats,
        });
        let (ended, on_end) = watch::channel(false);
        let join = if queues.is_empty() {
            tokio::spawn(async move {
                event_loop::without_queues(rx).await;
                ended.send_replace(true);
            })
        } else {
            let el = event_loop::EventLoop::new(
                broker.clone(),
                queues,
                config,
                tx.clone(),
                rx,
                stats.clone(),
            );
            tokio::spawn(async move {
                el.run().await;
                ended.send_replace(true);
            })
        };
        let mut beside = Vec::new();
        if let Some(h) = heartbeat {
            beside.push(tokio::spawn(h.run(on_end.clone())));
        }
        if let Some(p) = periodic {
            beside.push(tokio::spawn(p.run(on_end)));
        }
        Worker {
            broker,
            tx,
            stats,
            join: Some(join),
            beside,
        }
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(event_loop::Event::Command(make(tx)))
            .map_err(|_| Error::Closed("worker"))?;
        rx.await.map_err(|_| Error::Closed("worker"))
    }

    /// Stops starting jobs of `queue` and hands its buffered jobs back at once (not charged).
    pub async fn pause(&self, queue: &str) -> Result<()> {
        self.ask(|tx| Command::Pause(queue.to_owned(), tx)).await?
    }

    /// Works `queue` again.
    pub async fn resume(&self, queue: &str) -> Result<()> {
        self.ask(|tx| Command::Resume(queue.to_owned(), tx)).await?
    }

    /// Cancels a job that has not started: pending in the broker, buffered here, or waiting
    /// in a hand-off. Returns whether it was cancelled; `false` when it already started,
    /// finished, or is held by another worker.
    pub async fn cancel(&self, id: JobId) -> Result<bool> {
        match self.broker.cancel(id).await? {
            CancelOutcome::Cancelled => Ok(true),
            CancelOutcome::NotFound => Ok(false),
            CancelOutcome::Held(_) => self.ask(|tx| Command::Cancel(id, tx)).await,
        }
    }

    /// Pending and processing jobs of `queue`. A job waiting in a hand-off is pending.
    pub async fn counts(&self, queue: &str) -> Result<WorkerCounts> {
        let (held_pending, processing) = self
            .ask(|tx| Command::Counts(queue.to_owned(), tx))
            .await??;
        let broker = self.broker.counts(queue).await?;
        Ok(WorkerCounts {
            pending: broker.pending + held_pending,
            processing,
        })
    }

    /// A snapshot of the worker's statistics.
    pub fn stats(&self) -> WorkerStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops gracefully with the grace period set at build time.
    pub async fn shutdown(self) -> WorkerStats {
        self.shutdown_within(None).await
    }

    /// Stops gracefully: no more fetches; buffered jobs handed back at once; running
    /// handlers get `grace` to finish, then what is left is handed back.
    pub async fn shutdown_with(self, grace: Duration) -> WorkerStats {
        self.shutdown_within(Some(grace)).await
    }

    async fn shutdown_within(mut self, grace: Option<Duration>) -> WorkerStats {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .send(event_loop::Event::Command(Command::Shutdown(grace, tx)))
            .is_ok()
        {
            let _ = rx.await;
        }
        if let Some(join) = self.join.take() {
            let _ = join.await;
        }
        for task in std::mem::take(&mut self.beside) {
            let _ = task.await;
        }
        self.stats()
    }
}
