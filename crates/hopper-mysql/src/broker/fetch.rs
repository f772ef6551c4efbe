//! [`MySqlBroker::fetch`](hopper_core::Broker::fetch): the question asked first while a
//! worker waits on empty queues, the claim's transaction, and what the broker remembers of
//! each queue for the next one.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use hopper_core::{FetchRequest, Fetched, LeaseId, Result};

use super::{KEYED_DEADLOCKS, MySqlBroker};
use crate::conn::{Repeat, run, transaction};
use crate::queries::{self, millis};

/// The budgets of a request with each queue once (limits of a repeated queue add up) and
/// empty budgets left out.
fn merge_budgets(request: &FetchRequest) -> Vec<(&str, usize)> {
    let mut merged: BTreeMap<&str, usize> = BTreeMap::new();
    for budget in request.budgets.iter().filter(|b| b.limit > 0) {
        let limit = merged.entry(budget.queue.as_str()).or_default();
        *limit = limit.saturating_add(budget.limit);
    }
    merged.into_iter().collect()
}

impl MySqlBroker {
    pub(super) async fn fetch_jobs(&self, request: FetchRequest) -> Result<Fetched> {
        // The claim sets the lowest bit when it takes a job with an ordering key.
        let lease = LeaseId::random();
        let budgets = merge_budgets(&request);
        if budgets.is_empty() {
            return Ok(Fetched {
                lease,
                jobs: Vec::new(),
                next_due: None,
            });
        }
        let now = self.now();
        let ttl = millis(request.lease_ttl);
        let reap = self.reap_due(now);
        let union = &self.inner.union_claims;
        let by_levels: Vec<bool> = {
            let set = self.by_levels();
            budgets.iter().map(|(q, _)| set.contains(*q)).collect()
        };
        // A worker waiting on empty queues polls: then one statement, outside a
        // transaction, says whether the claim's transaction (four or five statements on
        // empty queues) would find anything. Only when every queue came back short last
        // time and nothing woke the broker since, so a fetch that a wake-up asked for (an
        // enqueue, a retry, the wake poller) never pays it.
        let woken = *self.inner.wake.borrow();
        let quiet = self.inner.quiet_since.load(Ordering::Relaxed) == woken.wrapping_add(1);
        if quiet && by_levels.iter().all(|&b| b) {
            let queues: Vec<&str> = budgets.iter().map(|(q, _)| *q).collect();
            let probe = run!(
                &self.inner.conns,
                "probing for jobs",
                Repeat::Safe,
                |conn| { queries::probe(conn, &queues, reap, now) }
            )?;
            if !probe.found_work() {
                return Ok(Fetched {
                    lease,
                    jobs: Vec::new(),
                    next_due: probe.next_due(),
                });
            }
        }
        let by_levels = &by_levels;
        // The reaper may end jobs with ordering keys, whose keys' rows it then locks: run
        // again after a deadlock as an enqueue with keys is.
        let (jobs, lease, next_due, woke, short) = transaction!(
            &self.inner.conns,
            "fetching jobs",
            deadlocks = KEYED_DEADLOCKS,
            |conn| async {
                let reaped = if reap {
                    Some(queries::reap(conn, now).await?)
                } else {
                    None
                };
                let mut levels = Vec::with_capacity(budgets.len());
                for ((queue, _), by_levels) in budgets.iter().zip(by_levels) {
                    levels.push(if *by_levels {
                        queries::levels(conn, queue).await?
                    } else {
                        None
                    });
                }
                let (jobs, lease) =
                    queries::claim(conn, &budgets, &levels, lease, ttl, now, union).await?;
                let short: Vec<&str> = budgets
                    .iter()
                    .filter(|(queue, limit)| {
                        jobs.iter().filter(|j| j.queue == *queue).count() < *limit
                    })
                    .map(|(queue, _)| *queue)
                    .collect();
                let next_due = queries::next_due(conn, &short, now).await?;
                let woke = reaped.is_some_and(|r| r.moved > 0 || r.unblocked);
                Ok((jobs, lease, next_due, woke, short))
            }
        )?;
        {
            let mut set = self.by_levels();
            for (queue, _) in &budgets {
                if short.contains(queue) {
                    set.insert((*queue).to_owned());
                } else {
                    set.remove(*queue);
                }
            }
        }
        let all_short = short.len() == budgets.len();
        self.inner.quiet_since.store(
            if all_short { woken.wrapping_add(1) } else { 0 },
            Ordering::Relaxed,
        );
        if woke {
            self.wake();
        }
        Ok(Fetched {
            lease,
            jobs,
            next_due,
        })
    }
}
