//! Fetching: one claim statement takes every queue's budget under a new lease, cut to the
//! room of each limited queue's rate window (see `rate`), and carries the reaper of
//! expired leases when it is due (see claim.sql).

use hopper_core::job::{to_millis, unreadable_row};
use hopper_core::{
    FetchRequest, Fetched, Job, JobId, LeaseId, Millis, Outcome, Result, Settlement,
};
use sqlx::Row;

use super::rate::broken_limit;
use super::rows::job_from_row;
use super::{PgBroker, db_err};
use crate::conn::Held;

impl PgBroker {
    /// [`Broker::fetch`](hopper_core::Broker::fetch).
    pub(super) async fn fetch_jobs(&self, request: &FetchRequest) -> Result<Fetched> {
        let lease = LeaseId::random();
        let now = self.now();
        let now_hint = now.unwrap_or_else(|| to_millis(std::time::SystemTime::now()));
        let (mut queues, mut limits) = (Vec::new(), Vec::<i32>::new());
        for b in request.budgets.iter().filter(|b| b.limit > 0) {
            let n = b.limit.min(i32::MAX as usize) as i32;
            // A queue asked twice is one budget: its rate window cuts them as one.
            match queues.iter().position(|q| q == &b.queue) {
                Some(i) => limits[i] = limits[i].saturating_add(n),
                None => {
                    queues.push(b.queue.clone());
                    limits.push(n);
                }
            }
        }
        if queues.is_empty() {
            return Ok(Fetched {
                lease,
                jobs: Vec::new(),
                next_due: None,
            });
        }
        let mut held = self.inner.claims.get().await?;
        self.prune(held.conn(), now_hint).await?;
        self.prune_keys_when_due(now_hint);
        let ttl = request.lease_ttl.as_millis() as i64;
        // The claim statement carries the reaper when it is due (see claim.sql).
        let reap = self.inner.reap_pace.due(now_hint);
        let (mut jobs, mut next_due, reaped, mut unreadable, lines, keyed) = claim(
            &self.inner.sql.claim,
            &self.inner.channel,
            &mut held,
            &queues,
            &limits,
            now,
            lease,
            ttl,
            reap,
        )
        .await?;
        if reaped {
            self.bump();
            let asked: i64 = limits.iter().map(|&n| i64::from(n)).sum();
            if (jobs.len() as i64) < asked {
                // Jobs the reaper returned are invisible to the claim of the same
                // statement: claim again for what is left of each budget.
                let left: Vec<i32> = queues
                    .iter()
                    .zip(&limits)
                    .map(|(q, &n)| {
                        (n - jobs.iter().filter(|j| &j.queue == q).count() as i32).max(0)
                    })
                    .collect();
                let (more, due, _, more_unreadable, _, _) = claim(
                    &self.inner.sql.claim,
                    &self.inner.channel,
                    &mut held,
                    &queues,
                    &left,
                    now,
                    lease,
                    ttl,
                    false,
                )
                .await?;
                jobs.extend(more);
                unreadable.extend(more_unreadable);
                next_due = due;
            }
        }
        for (queue, asked) in keyed {
            // Queues limited per key: claimed against their keys' windows (0016).
            let (more, due, more_unreadable) = self
                .claim_keyed(&mut held, &queue, asked, now, lease, ttl)
                .await?;
            jobs.extend(more);
            unreadable.extend(more_unreadable);
            next_due = earliest(next_due, due);
        }
        if !lines.is_empty() {
            // The reaper dead-lettered keyed jobs: their keys' next jobs may go.
            self.unblock(held.conn(), lines).await?;
        }
        drop(held);
        if !unreadable.is_empty() {
            self.bury(lease, unreadable).await?;
        }
        self.count_claims(jobs.len());
        jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.run_at, j.id));
        Ok(Fetched {
            lease,
            jobs,
            next_due,
        })
    }
}

impl PgBroker {
    /// Dead-letters claimed rows that cannot be read as jobs (a column another program
    /// wrote out of range), with the reason, and logs each: they must neither fail every
    /// claim that reaches them nor come back.
    async fn bury(&self, lease: LeaseId, rows: Vec<Unreadable>) -> Result<()> {
        let mut dead = Vec::with_capacity(rows.len());
        for row in rows {
            tracing::error!(job = row.id, queue = %row.queue, reason = %row.reason,
                "dead-lettered a row that cannot be read as a job");
            dead.push(Settlement {
                job: JobId(row.id),
                lease,
                outcome: Outcome::DeadLetter { error: row.reason },
            });
        }
        self.settle_jobs(&dead).await.map(drop)
    }
}

/// A claimed row that cannot be read as a job, and why.
struct Unreadable {
    id: i64,
    queue: String,
    reason: String,
}

/// The result of one claim.sql: the jobs claimed, the next due time, whether the reaper
/// returned jobs to pending, the claimed rows that cannot be read as jobs, the queue and
/// ordering key of each keyed job the reaper dead-lettered, and the queues limited per key
/// with their budgets, which it left to [`PgBroker::claim_keyed`].
type Claimed = (
    Vec<Job>,
    Option<Millis>,
    bool,
    Vec<Unreadable>,
    Vec<(String, String)>,
    Vec<(String, i32)>,
);

/// Runs claim.sql once: the jobs claimed under `lease`, the next due time when fewer than
/// asked were claimed, whether the reaper (run when `reap`) returned jobs to pending, the
/// claimed rows that cannot be read as jobs, and the keys the reaper moved on.
#[allow(clippy::too_many_arguments)]
async fn claim(
    sql: &str,
    channel: &str,
    held: &mut Held<'_>,
    queues: &[String],
    limits: &[i32],
    now: Option<Millis>,
    lease: LeaseId,
    ttl_ms: i64,
    reap: bool,
) -> Result<Claimed> {
    let asked: i64 = limits.iter().map(|&n| i64::from(n)).sum();
    let rows = sqlx::query(sql)
        .bind(queues)
        .bind(limits)
        .bind(now)
        .bind(lease.0)
        .bind(ttl_ms)
        .bind(reap)
        .bind(asked.min(i64::from(i32::MAX)) as i32)
        .bind(hopper_core::admin::ERROR_HISTORY as i32)
        .bind(channel)
        .fetch_all(held.conn())
        .await
        .map_err(|e| held.fail("claiming jobs", e))?;
    // Kind 0 is a claimed job, 1 the next due time, 2 how many jobs the reaper returned,
    // 3 a key whose job the reaper dead-lettered, 4 a rate limit stored wrong, 6 when a
    // full rate window that cut a budget has room again, 7 a queue limited per key.
    let mut jobs = Vec::with_capacity(rows.len());
    let (mut next_due, mut reaped, mut unreadable) = (None, false, Vec::new());
    let (mut lines, mut keyed) = (Vec::new(), Vec::new());
    for row in &rows {
        let kind: i16 = row.try_get(9).map_err(db_err("decoding claimed jobs"))?;
        let extra: Option<i64> = row.try_get(10).map_err(db_err("decoding claimed jobs"))?;
        match kind {
            0 => match job_from_row(row, lease) {
                Ok(job) => jobs.push(job),
                Err(e) => unreadable.push(Unreadable {
                    id: row.try_get(0).map_err(db_err("decoding claimed jobs"))?,
                    queue: row.try_get(1).map_err(db_err("decoding claimed jobs"))?,
                    reason: match e {
                        sqlx::Error::ColumnDecode { index, source } => {
                            unreadable_row(format_args!("column {index}: {source}"))
                        }
                        other => unreadable_row(other),
                    },
                }),
            },
            1 | 6 => next_due = earliest(next_due, extra),
            2 => reaped = true,
            4 => {
                let queue: String = row.try_get(1).map_err(db_err("decoding claimed jobs"))?;
                let why: String = row.try_get(11).map_err(db_err("decoding claimed jobs"))?;
                broken_limit(&queue, &why);
            }
            7 => keyed.push((
                row.try_get(1).map_err(db_err("decoding claimed jobs"))?,
                extra.unwrap_or(0).clamp(0, i64::from(i32::MAX)) as i32,
            )),
            _ => lines.push((
                row.try_get(1).map_err(db_err("decoding claimed jobs"))?,
                row.try_get(11).map_err(db_err("decoding claimed jobs"))?,
            )),
        }
    }
    Ok((jobs, next_due, reaped, unreadable, lines, keyed))
}

impl PgBroker {
    /// Claims up to `asked` jobs of `queue`, limited per key, with claim_keyed.sql: the jobs,
    /// the earliest time it moved a job held back by its key's window to, and the claimed
    /// rows that cannot be read as jobs.
    async fn claim_keyed(
        &self,
        held: &mut Held<'_>,
        queue: &str,
        asked: i32,
        now: Option<Millis>,
        lease: LeaseId,
        ttl_ms: i64,
    ) -> Result<(Vec<Job>, Option<Millis>, Vec<Unreadable>)> {
        let rows = sqlx::query(&self.inner.sql.claim_keyed)
            .bind(queue)
            .bind(asked)
            .bind(now)
            .bind(lease.0)
            .bind(ttl_ms)
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("claiming jobs limited per key", e))?;
        let (mut jobs, mut next_due) = (Vec::with_capacity(rows.len()), None);
        let mut unreadable = Vec::new();
        for row in &rows {
            let id: Option<i64> = row.try_get(0).map_err(db_err("decoding claimed jobs"))?;
            if id.is_none() {
                next_due = row.try_get(4).map_err(db_err("decoding claimed jobs"))?;
                continue;
            }
            match job_from_row(row, lease) {
                Ok(job) => jobs.push(job),
                Err(e) => unreadable.push(Unreadable {
                    id: id.unwrap_or_default(),
                    queue: queue.to_owned(),
                    reason: unreadable_row(e),
                }),
            }
        }
        Ok((jobs, next_due, unreadable))
    }
}

/// The earlier of two due times, either of which may be missing.
fn earliest(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
