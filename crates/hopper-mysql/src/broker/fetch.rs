//! [`MySqlBroker::fetch`](hopper_core::Broker::fetch): the question asked first while a
//! worker waits on empty queues, the claim's transaction, and what the broker remembers of
//! each queue for the next one; and [`set_rate_limit`](hopper_core::Broker::set_rate_limit),
//! which tells the claims of this broker which queues to lock.
//!
//! A claim over queues this broker knows to be rate-limited locks their rows first and
//! claims at most their room (`queries::rate`); a claim that finds a queue limited since
//! (another process set it) takes nothing, and the fetch claims again, locking it. A fetch
//! makes at most [`CLAIM_ROUNDS`] claims: the last takes the jobs of every other queue, so
//! that limits set and lifted without end cannot hold the fetch.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use hopper_core::job::validate_queue_name;
use hopper_core::{FetchRequest, Fetched, Job, LeaseId, Millis, RateLimit, Result};

use super::{KEYED_DEADLOCKS, MySqlBroker};
use crate::conn::{Repeat, run, transaction};
use crate::queries::{self, Claim, millis};

/// The most claims one fetch makes (see the module's documentation).
const CLAIM_ROUNDS: u32 = 3;

/// What one claim's transaction did.
enum Round {
    /// It took `jobs`; `short` are the queues that came back short of their room or
    /// budget, `lifted` the queues this broker thought limited that have no limit now.
    Claimed {
        jobs: Vec<Job>,
        lease: LeaseId,
        next_due: Option<Millis>,
        woke: bool,
        short: Vec<String>,
        lifted: Vec<String>,
    },
    /// It found these queues limited without holding their rows, and took nothing.
    Limited { queues: Vec<String>, woke: bool },
}

fn earliest(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

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
        // The claim sets the lowest bit when it takes a job with an ordering key or a group.
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
        let mut reap = self.reap_due(now);
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
        let step = self.inner.id_step;
        let mut woke = false;
        let mut round = 1;
        let (jobs, lease, next_due, short) = loop {
            // The queues this broker knows to be limited: their claim locks them first.
            let limited: Vec<&str> = {
                let set = self.limited();
                let known = budgets.iter().map(|(q, _)| *q);
                known.filter(|q| set.contains(*q)).collect()
            };
            let (limited, give_up) = (&limited, round == CLAIM_ROUNDS);
            // The reaper may end jobs with ordering keys, whose keys' rows it then locks:
            // run again after a deadlock as an enqueue with keys is.
            let done = transaction!(
                &self.inner.conns,
                "fetching jobs",
                deadlocks = KEYED_DEADLOCKS,
                |conn| async {
                    let reaped = if reap {
                        Some(queries::reap(conn, now, step).await?)
                    } else {
                        None
                    };
                    let woke = reaped.is_some_and(|r| r.moved > 0 || r.unblocked);
                    // Limited queues' rows, locked before any job is read; the claim goes
                    // by the time read with them.
                    let mut windows = queries::lock_windows(conn, limited, now).await?;
                    let now = windows.now;
                    let asked: Vec<(&str, usize)> = budgets
                        .iter()
                        .map(|&(q, limit)| (q, windows.room(q).map_or(limit, |r| limit.min(r))))
                        .collect();
                    let mut levels = Vec::with_capacity(asked.len());
                    for ((queue, limit), by_levels) in asked.iter().zip(by_levels) {
                        levels.push(if *by_levels && *limit > 0 {
                            queries::levels(conn, queue).await?
                        } else {
                            None
                        });
                    }
                    let claim = queries::claim(
                        conn,
                        &asked,
                        &levels,
                        lease,
                        ttl,
                        now,
                        union,
                        &mut windows,
                        give_up,
                        step,
                    );
                    let (jobs, lease) = match claim.await? {
                        Claim::Taken(jobs, lease) => (jobs, lease),
                        Claim::Limited(queues) => return Ok(Round::Limited { queues, woke }),
                    };
                    // A queue short of what it was asked ran out of due jobs; one that
                    // filled a room smaller than its budget waits for its window.
                    let (mut short, mut window_due) = (Vec::new(), None);
                    for (&(queue, budget), &(_, room)) in budgets.iter().zip(&asked) {
                        let got = jobs.iter().filter(|j| j.queue == queue).count();
                        windows.started(queue, got);
                        if got < room {
                            short.push(queue);
                            if windows.capped(queue) {
                                // Due jobs are likely left behind those it moved.
                                window_due = earliest(window_due, now);
                            }
                        } else if room < budget {
                            window_due = earliest(window_due, windows.next_room(queue));
                        }
                    }
                    queries::write_windows(conn, &mut windows).await?;
                    let next_due = queries::next_due(conn, &short, now).await?;
                    Ok(Round::Claimed {
                        jobs,
                        lease,
                        next_due: earliest(next_due, window_due),
                        woke,
                        short: short.into_iter().map(str::to_owned).collect(),
                        lifted: limited
                            .iter()
                            .filter(|q| !windows.holds(q))
                            .map(|q| (*q).to_owned())
                            .collect(),
                    })
                }
            )?;
            match done {
                Round::Limited { queues, woke: w } => {
                    woke |= w;
                    // What the reaper had to return, it returned.
                    reap = false;
                    round += 1;
                    self.limited().extend(queues);
                }
                Round::Claimed {
                    jobs,
                    lease,
                    next_due,
                    woke: w,
                    short,
                    lifted,
                } => {
                    woke |= w;
                    let mut set = self.limited();
                    for queue in &lifted {
                        set.remove(queue);
                    }
                    break (jobs, lease, next_due, short);
                }
            }
        };
        {
            let mut set = self.by_levels();
            for (queue, _) in &budgets {
                if short.iter().any(|s| s == queue) {
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

    /// Sets or lifts `queue`'s rate limit, and tells this broker's claims whether to lock
    /// it. Workers of this process are woken: a lifted or raised limit lets them claim now.
    pub(super) async fn set_limit(&self, queue: &str, limit: Option<RateLimit>) -> Result<()> {
        validate_queue_name(queue)?;
        let what = match limit {
            Some(_) => "setting a rate limit",
            None => "lifting a rate limit",
        };
        // The limit's row and whether it holds per key change together.
        transaction!(&self.inner.conns, what, |conn| {
            queries::set_limit(conn, queue, limit)
        })?;
        {
            let mut set = self.limited();
            match limit {
                Some(_) => set.insert(queue.to_owned()),
                None => set.remove(queue),
            };
        }
        self.wake();
        Ok(())
    }
}
