//! Leases: every fetch's jobs are held under one lease, renewed every third of its time to
//! live while any of them is unsettled; a lease the broker reports lost takes its jobs back,
//! and the worker drops the ones it has not started (docs/design.md, "Leases and fencing").

use std::time::Duration;

use tokio::time::Instant;

use super::tasks::TaskWork;
use super::{Event, EventLoop};
use crate::error::Result;
use crate::job::{IdMap, IdSet, LeaseId};
use crate::worker::stats::WorkerStats;

pub(super) struct Leases {
    /// The broker has leases to renew; brokers without (RabbitMQ) are never asked.
    enabled: bool,
    /// The worker renews leases (it may be turned off when each holds one job).
    renewal: bool,
    ttl: Duration,
    /// Jobs held under each lease and not yet settled.
    held: IdMap<LeaseId, usize>,
    /// Leases the broker reported lost: their jobs are not settled by this worker.
    lost: IdSet<LeaseId>,
    renew_in_flight: bool,
    next_renew: Instant,
}

impl Leases {
    pub(super) fn new(enabled: bool, renewal: bool, ttl: Duration) -> Self {
        Leases {
            enabled,
            renewal,
            ttl,
            held: IdMap::default(),
            lost: IdSet::default(),
            renew_in_flight: false,
            next_renew: Instant::now() + ttl / 3,
        }
    }

    /// A fetch brought `jobs` jobs under `lease`.
    #[inline]
    pub(super) fn held(&mut self, lease: LeaseId, jobs: usize) {
        if self.enabled {
            self.held.insert(lease, jobs);
        }
    }

    /// One job of `lease` is being settled; returns whether the settlement should go to the
    /// broker (`false` once the lease was lost: the broker took the job back).
    #[inline]
    pub(super) fn settled(&mut self, lease: LeaseId) -> bool {
        if let Some(n) = self.held.get_mut(&lease) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&lease);
            }
        }
        !self.lost.contains(&lease)
    }

    /// When the next renewal is due, if one will be sent.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        (self.enabled && self.renewal && !self.held.is_empty() && !self.renew_in_flight)
            .then_some(self.next_renew)
    }
}

impl EventLoop {
    pub(super) fn maybe_renew(&mut self, now: Instant) {
        let l = &mut self.leases;
        if !l.enabled || !l.renewal || l.renew_in_flight || now < l.next_renew {
            return;
        }
        l.next_renew = now + l.ttl / 3;
        if l.held.is_empty() {
            return;
        }
        l.renew_in_flight = true;
        let leases: Vec<LeaseId> = l.held.keys().copied().collect();
        let (broker, events, ttl) = (self.broker.clone(), self.events.clone(), l.ttl);
        tokio::spawn(async move {
            let result = broker.renew(&leases, ttl).await;
            let _ = events.send(Event::Renewed(result));
        });
    }

    /// A renewal came back with the leases that were already lost.
    pub(super) fn renewed(&mut self, result: Result<Vec<LeaseId>>, st: &mut WorkerStats) {
        self.leases.renew_in_flight = false;
        match result {
            Ok(lost) => {
                for lease in lost {
                    // A lease whose last job finished while the renewal was on its way,
                    // settled before the renewal ran, is not lost: the broker just holds
                    // nothing under it any more.
                    if self.leases.held.contains_key(&lease) {
                        st.leases_lost += 1;
                        self.lease_lost(lease);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e.chain(), "lease renewal failed; retrying"),
        }
    }

    fn lease_lost(&mut self, lease: LeaseId) {
        tracing::warn!(%lease, "lease lost: its jobs went back to their queues; dropping the ones not started");
        self.leases.held.remove(&lease);
        self.leases.lost.insert(lease);
        for q in &mut self.queues {
            q.buffer.retain(|j| j.lease != lease);
        }
        for work in self.tasks.working() {
            if let TaskWork::Jobs(h) = work {
                let dropped = h.take_lease(lease);
                self.queues[h.queue].in_handoffs -= dropped;
            }
        }
    }
}
