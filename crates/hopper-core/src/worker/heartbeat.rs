//! The worker's heartbeat: a task beside the event loop that reports the worker to a broker
//! that keeps live workers ([`crate::registry`]), every `every`, with what each queue holds
//! and what it settled since the last report. It asks the event loop for the first and
//! reads the second from the worker's statistics, so the loop's hot path carries nothing
//! for it. When the loop ends it sends what was settled since, and removes the worker.
//!
//! A report that fails is logged once (and once more when reports work again) and its
//! counts and fetch sizes go with the next one; a broker that cannot be reached never
//! stops the worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};

use super::event_loop::{Command, Event};
use super::stats::WorkerStats;
use crate::admin::Throughput;
use crate::broker::Broker;
use crate::job::to_millis;
use crate::registry::{
    FETCHES_PER_REPORT, MISSED_BEATS, QueueBeat, ScheduleBeat, WorkerBeat, WorkerInfo,
};

/// Where the heartbeat reads from and what it reports.
pub(super) struct Heartbeat {
    pub(super) broker: Arc<dyn Broker>,
    pub(super) stats: Arc<Mutex<WorkerStats>>,
    pub(super) events: mpsc::UnboundedSender<Event>,
    pub(super) every: Duration,
    /// The queues, in the order the worker was built with.
    pub(super) queues: Vec<String>,
    /// The schedules, as the periodic task keeps them up to date.
    pub(super) schedules: Arc<Mutex<Vec<ScheduleBeat>>>,
}

impl Heartbeat {
    /// Reports until `ended` turns true (the event loop returned), then removes the worker.
    pub(super) async fn run(self, mut ended: watch::Receiver<bool>) {
        let started = to_millis(SystemTime::now());
        let blank = self.queues.iter().map(|q| QueueBeat {
            queue: q.clone(),
            ..QueueBeat::default()
        });
        let mut info = WorkerInfo::this_process(started, blank.collect());
        let mut reported: HashMap<String, Throughput> = HashMap::new();
        let mut failing = false;
        // Per queue, the fetch sizes of a report that did not get through.
        let mut unsent: Vec<Vec<u32>> = vec![Vec::new(); self.queues.len()];
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                _ = ended.wait_for(|done| *done) => true,
            };
            if stopping {
                for q in &mut info.queues {
                    (q.held, q.running, q.window) = (0, 0, 0);
                }
            } else if let Some(mut queues) = self.ask_report().await {
                // Fetch sizes of a report that failed go with this one.
                for (q, carried) in queues.iter_mut().zip(&mut unsent) {
                    let mut fetches = std::mem::take(carried);
                    fetches.append(&mut q.fetches);
                    fetches.truncate(FETCHES_PER_REPORT);
                    q.fetches = fetches;
                }
                info.queues = queues;
            }
            info.schedules = self
                .schedules
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let (settled, totals) = self.settled_since(&reported);
            if !stopping || !settled.is_empty() {
                let beat = WorkerBeat {
                    worker: info.clone(),
                    ttl: self.every * MISSED_BEATS,
                    settled,
                };
                match self.broker.heartbeat(&beat).await {
                    Ok(()) => {
                        reported = totals;
                        if std::mem::take(&mut failing) {
                            tracing::info!(worker = %info.id, "worker heartbeat delivered again");
                        }
                    }
                    Err(e) => {
                        unsent = info.queues.iter().map(|q| q.fetches.clone()).collect();
                        if !std::mem::replace(&mut failing, true) {
                            tracing::warn!(
                                worker = %info.id,
                                error = %e.chain(),
                                "worker heartbeat failed; the worker keeps working and retries"
                            );
                        }
                    }
                }
            }
            if stopping {
                if let Err(e) = self.broker.deregister(&info.id).await {
                    tracing::warn!(
                        worker = %info.id,
                        error = %e.chain(),
                        "could not remove the stopped worker from the broker's list; it drops out when its report expires"
                    );
                }
                return;
            }
        }
    }

    /// The event loop's report of each queue, or `None` once the loop is gone.
    async fn ask_report(&self) -> Option<Vec<QueueBeat>> {
        let (tx, rx) = oneshot::channel();
        self.events.send(Event::Command(Command::Report(tx))).ok()?;
        rx.await.ok()
    }

    /// What each queue settled beyond `reported`, and the totals to remember once the
    /// report is delivered.
    fn settled_since(
        &self,
        reported: &HashMap<String, Throughput>,
    ) -> (Vec<(String, Throughput)>, HashMap<String, Throughput>) {
        let st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let mut settled = Vec::new();
        let mut totals = HashMap::with_capacity(st.queues.len());
        for (name, qs) in &st.queues {
            let now = Throughput {
                completed: qs.completed,
                failed: qs.retried,
                dead: qs.dead,
            };
            let before = reported.get(name).copied().unwrap_or_default();
            let delta = Throughput {
                completed: now.completed.saturating_sub(before.completed),
                failed: now.failed.saturating_sub(before.failed),
                dead: now.dead.saturating_sub(before.dead),
            };
            if !delta.is_empty() {
                settled.push((name.clone(), delta));
            }
            totals.insert(name.clone(), now);
        }
        (settled, totals)
    }
}
