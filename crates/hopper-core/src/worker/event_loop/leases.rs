//! Leases: every fetch's jobs are held under one lease, renewed every third of its time to
//! live while any of them is unsettled; a lease the broker reports lost takes its jobs back,
//! and the worker drops the ones it has not started (docs/design.md, "Leases and fencing").
//! A lease no renewal has confirmed for nearly its whole time is given up by the worker
//! itself, before the broker can give its jobs to another: the ones not started are
//! dropped and the running ones stopped ([`Expired`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::tasks::TaskWork;
use super::{Event, EventLoop};
use crate::error::Result;
use crate::job::{IdMap, IdSet, LeaseId};
use crate::worker::expired::Expired;
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
    /// Given up leases, shared with the pool; `None` when the worker never gives one up
    /// (its broker is in this process, or nothing is renewed).
    pub(super) expired: Option<Arc<Expired>>,
    /// Per held lease, when the request that last set its expiry left this worker: the
    /// broker's expiry is at least a lease's time after it.
    confirmed: IdMap<LeaseId, Instant>,
    /// When the renewal in flight left, and the leases it renews.
    renewing: (Instant, Vec<LeaseId>),
}

impl Leases {
    /// `expiry`: whether the worker gives up leases no renewal confirmed in time.
    pub(super) fn new(enabled: bool, renewal: bool, ttl: Duration, expiry: bool) -> Self {
        Leases {
            enabled,
            renewal,
            ttl,
            held: IdMap::default(),
            lost: IdSet::default(),
            renew_in_flight: false,
            next_renew: Instant::now() + ttl / 3,
            expired: (enabled && renewal && expiry).then(|| Arc::new(Expired::new(ttl))),
            confirmed: IdMap::default(),
            renewing: (Instant::now(), Vec::new()),
        }
    }

    /// A fetch sent at `sent` brought `jobs` jobs under `lease`.
    #[inline]
    pub(super) fn held(&mut self, lease: LeaseId, jobs: usize, sent: Instant) {
        if self.enabled {
            self.held.insert(lease, jobs);
            if self.expired.is_some() {
                self.confirmed.insert(lease, sent);
            }
        }
    }

    /// When a lease confirmed at `at` is given up: a tenth of its time before the broker's
    /// expiry could come, for the stop to reach the handler and for clocks that run apart.
    fn give_up_at(&self, at: Instant) -> Instant {
        at + self.ttl - self.ttl / 10
    }

    /// Whether a settlement of a job under `lease` should go to the broker: `false` once
    /// the lease was lost, since the broker took the job back.
    #[inline]
    pub(super) fn keeps(&self, lease: LeaseId) -> bool {
        !self.lost.contains(&lease)
    }

    /// The broker applied the settlement of one job of `lease`. Until then the job is
    /// still held, and its lease renewed: a settlement that waits (a slow or broken
    /// connection, a batch retried) must not let the lease run out and the job run again.
    #[inline]
    pub(super) fn applied(&mut self, lease: LeaseId) {
        if let Some(n) = self.held.get_mut(&lease) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&lease);
                self.confirmed.remove(&lease);
            }
        }
    }

    /// When the next renewal is due, if one will be sent.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        (self.enabled && self.renewal && !self.held.is_empty() && !self.renew_in_flight)
            .then_some(self.next_renew)
    }

    /// When the earliest held lease expires at the broker at the soonest (its last
    /// confirmation plus its time), where the worker tracks confirmations.
    pub(super) fn earliest_expiry(&self) -> Option<Instant> {
        self.confirmed.values().min().map(|&at| at + self.ttl)
    }

    /// When the earliest held lease is to be given up, if the worker gives any up.
    pub(super) fn next_give_up(&self) -> Option<Instant> {
        self.confirmed.values().min().map(|&at| self.give_up_at(at))
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
        if l.expired.is_some() {
            l.renewing = (now, leases.clone());
        }
        let (broker, events, ttl) = (self.broker.clone(), self.events.clone(), l.ttl);
        tokio::spawn(async move {
            let result = broker.renew(&leases, ttl).await;
            let _ = events.send(Event::Renewed(result));
        });
    }

    /// A renewal came back with the leases that were already lost.
    pub(super) fn renewed(&mut self, result: Result<Vec<LeaseId>>, st: &mut WorkerStats) {
        self.leases.renew_in_flight = false;
        let (sent, renewing) =
            std::mem::replace(&mut self.leases.renewing, (Instant::now(), Vec::new()));
        match result {
            Ok(lost) => {
                let kept = renewing.len().saturating_sub(lost.len());
                self.meters.renewals.increment(kept as u64);
                for lease in renewing.iter().filter(|l| !lost.contains(l)) {
                    if let Some(at) = self.leases.confirmed.get_mut(lease) {
                        *at = (*at).max(sent);
                    }
                }
                for lease in lost {
                    // A lease whose last job finished while the renewal was on its way,
                    // settled before the renewal ran, is not lost: the broker just holds
                    // nothing under it any more.
                    if self.leases.held.contains_key(&lease) {
                        st.leases_lost += 1;
                        self.meters.leases_lost.increment(1);
                        self.lease_lost(lease);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e.chain(), "lease renewal failed; retrying"),
        }
    }

    /// Gives up the leases no renewal has confirmed in time ([`Leases::next_give_up`]).
    pub(super) fn give_up_leases(&mut self, now: Instant, st: &mut WorkerStats) {
        let Some(expired) = self.leases.expired.clone() else {
            return;
        };
        let due: Vec<LeaseId> = (self.leases.confirmed.iter())
            .filter(|&(_, &at)| self.leases.give_up_at(at) <= now)
            .map(|(&lease, _)| lease)
            .collect();
        for lease in due {
            tracing::warn!(
                %lease,
                ttl = ?self.leases.ttl,
                "no lease renewal reached the broker in time: giving the lease up, stopping \
                 its running jobs and dropping the ones not started"
            );
            st.leases_lost += 1;
            self.meters.leases_lost.increment(1);
            expired.expire(lease);
            self.lease_lost(lease);
        }
    }

    fn lease_lost(&mut self, lease: LeaseId) {
        tracing::warn!(%lease, "lease lost: its jobs went back to their queues; dropping the ones not started");
        self.leases.held.remove(&lease);
        self.leases.confirmed.remove(&lease);
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
