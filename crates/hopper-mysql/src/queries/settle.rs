//! Settling, inside the caller's transaction: acks in one `DELETE`, every other outcome in
//! one `UPDATE`, each applied only while its job is still held under the named lease; and
//! then, for jobs with ordering keys that ended or stepped aside for their retry, their
//! keys' next jobs unblocked.

use std::collections::{HashMap, HashSet};

use hopper_core::admin::bounded_error;
use hopper_core::{JobId, Millis, Outcome, SettleReport, Settlement};
use sqlx::Row;
use sqlx::mysql::MySqlConnection;

use super::groups::{self, Ended, Member};
use super::millis;
use super::ordering::{self, Line};
use super::rows::LEASED;
use super::unique;
use crate::conn::restart;
use crate::sql::{self, MAX_LIST, MAX_SETTLE_ROWS, padded, padded_tuples};

/// `settle_update.sql`'s outcome codes.
const RETRY: i8 = 1;
const DEAD_LETTER: i8 = 2;
const RELEASE: i8 = 3;
const CANCEL: i8 = 4;
const SNOOZE: i8 = 5;

/// What a settle did, and whether any job went back to pending (to wake workers).
pub(crate) struct Settled {
    pub(crate) report: SettleReport,
    pub(crate) requeued: bool,
}

/// Applies settlements inside the caller's transaction: those whose job is still held
/// under the named lease apply, the others are fenced.
///
/// First optimistically, with the lease in every statement's condition: when each
/// statement touched as many rows as it named, all applied. Otherwise (something was
/// fenced, or a job is named twice) the transaction starts over, locks the named rows to
/// learn which are still held under their lease, and applies exactly those.
///
/// Settlements under a lease whose claim took a job with an ordering key or a member of a
/// group ([`ordering::is_ordered`]) go straight to the locking read, which also gives each
/// job's key and group: the members that ended (acknowledged, dead-lettered, cancelled) are
/// counted ([`groups::ended`]), then the keys of the jobs that ended move on, and the jobs
/// whose retry steps aside (`Outcome::Retry::step_aside`) move behind their keys when
/// other jobs wait there, in the same transaction ([`ordering::settled`]). Only a job with
/// a key can step aside, so only these settlements look at the flag.
pub(crate) async fn settle(
    conn: &mut MySqlConnection,
    settlements: &[Settlement],
    now: Option<Millis>,
    id_step: i64,
) -> Result<Settled, sqlx::Error> {
    let distinct: HashSet<JobId> = settlements.iter().map(|s| s.job).collect();
    let ordered = settlements.iter().any(|s| ordering::is_ordered(s.lease));
    if !ordered && distinct.len() == settlements.len() {
        let all: Vec<&Settlement> = settlements.iter().collect();
        if apply(conn, &all, now).await? == settlements.len() as u64 {
            return Ok(Settled {
                report: SettleReport {
                    applied: settlements.len(),
                    fenced: Vec::new(),
                },
                requeued: all.iter().any(|s| requeues(&s.outcome)),
            });
        }
        restart(conn).await?;
    }

    let ids: Vec<i64> = distinct.iter().map(|id| id.0).collect();
    let mut held = HashMap::with_capacity(ids.len());
    let mut lines: HashMap<i64, Line> = HashMap::new();
    let mut members: HashMap<i64, Vec<u8>> = HashMap::new();
    for chunk in ids.chunks(MAX_LIST) {
        let size = padded(chunk.len());
        let text = sql::with_ids(&sql::SETTLE_LOCK, size);

        let mut query = sqlx::query(&text);
        for i in 0..size {
            query = query.bind(chunk.get(i).copied().unwrap_or(0));
        }
        for row in query.fetch_all(&mut *conn).await? {
            let (id, state, lease): (i64, i8, Option<i64>) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            if let (LEASED, Some(lease)) = (state, lease) {
                held.insert(id, lease);
            }
            if let Some(key) = row.try_get::<Option<Vec<u8>>, _>(4)? {
                // `ascii_bin` reaches the client flagged binary (see `rows`).
                lines.insert(id, (row.try_get_unchecked(3)?, key));
            }
            if let Some(group) = groups::group_of(&row, 5)? {
                members.insert(id, group);
            }
        }
    }
    let mut applied = Vec::new();
    let mut fenced = Vec::new();
    for s in settlements {
        // `remove`: a job named twice applies once, the first time.
        if held.get(&s.job.0) == Some(&s.lease.0) {
            held.remove(&s.job.0);
            applied.push(s);
        } else {
            fenced.push(s.job);
        }
    }
    // A retry that steps aside is weighed against its key's other jobs at the instant it
    // is put back, as the broker's own clock has it: on the database's clock, read once
    // for the whole settlement. Read by each statement, the clock moves on between the
    // retry and the read of the key's next job, and a job stepping aside for a few
    // milliseconds would often find its time come there and take the key back.
    let steps = applied
        .iter()
        .any(|s| steps_aside(&s.outcome) && lines.contains_key(&s.job.0));
    let now = match steps {
        true => Some(unique::clock(conn, now).await?),
        false => now,
    };
    apply(conn, &applied, now).await?;
    // Members that ended are counted (their groups' rows locked after the jobs' rows,
    // before any key's), in the order they were settled.
    let counted: Vec<Member> = applied
        .iter()
        .filter_map(|s| {
            let how = match s.outcome {
                Outcome::Ack => Ended::Succeeded,
                Outcome::DeadLetter { .. } => Ended::Dead,
                Outcome::Cancel => Ended::Cancelled,
                _ => return None,
            };
            Some((members.remove(&s.job.0)?, s.job.0, how))
        })
        .collect();
    let fired = groups::ended(conn, counted, now, id_step).await?;
    // Jobs that ended let their keys move on; a retry that steps aside may give its key
    // up; every other job put back keeps its key.
    let (mut ended, mut aside): (Vec<Line>, Vec<(i64, Line)>) = (Vec::new(), Vec::new());
    for s in &applied {
        let Some(line) = lines.remove(&s.job.0) else {
            continue;
        };
        if steps_aside(&s.outcome) {
            aside.push((s.job.0, line));
        } else if !requeues(&s.outcome) {
            ended.push(line);
        }
    }
    let unblocked = ordering::settled(conn, ended, aside, now).await?;
    Ok(Settled {
        report: SettleReport {
            applied: applied.len(),
            fenced,
        },
        requeued: unblocked || fired || applied.iter().any(|s| requeues(&s.outcome)),
    })
}

/// Whether a settlement is a retry that steps aside from its job's ordering key.
fn steps_aside(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Retry {
            step_aside: true,
            ..
        }
    )
}

/// Whether a settlement puts its job back in its queue: the others end it.
fn requeues(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Retry { .. } | Outcome::Release | Outcome::Snooze { .. }
    )
}

/// Runs the settlements' statements (acks in one DELETE, the rest in one UPDATE, per
/// chunk) and returns the rows they touched.
async fn apply(
    conn: &mut MySqlConnection,
    settlements: &[&Settlement],
    now: Option<Millis>,
) -> Result<u64, sqlx::Error> {
    let (acks, others): (Vec<&Settlement>, Vec<&Settlement>) = settlements
        .iter()
        .partition(|s| matches!(s.outcome, Outcome::Ack));
    let mut touched = 0;
    for chunk in acks.chunks(MAX_LIST) {
        // Two pairs at least: MariaDB reads a list of one as a row equality, which bounds
        // no range in a `DELETE`, so one ack would read and lock the whole table.
        let size = padded_tuples(chunk.len());
        let text = sql::with_pairs(&sql::SETTLE_ACK, size);

        let mut query = sqlx::query(&text);
        for i in 0..size {
            let (id, lease) = chunk.get(i).map_or((0, 0), |s| (s.job.0, s.lease.0));
            query = query.bind(id).bind(lease);
        }
        touched += query.execute(&mut *conn).await?.rows_affected();
    }
    for chunk in others.chunks(MAX_SETTLE_ROWS) {
        let size = padded(chunk.len());
        let text = sql::settle_update(size);

        let mut query = sqlx::query(&text);
        for i in 0..size {
            let Some(s) = chunk.get(i) else {
                query = query
                    .bind(0i64)
                    .bind(0i64)
                    .bind(0i8)
                    .bind(0i64)
                    .bind(None::<&str>)
                    .bind(None::<&str>);
                continue;
            };
            let (kind, delay_ms, error) = match &s.outcome {
                // A step aside is a retry here; the job moves behind its key afterwards.
                Outcome::Retry { delay, error, .. } => {
                    (RETRY, millis(*delay), Some(error.as_str()))
                }
                Outcome::DeadLetter { error } => (DEAD_LETTER, 0, Some(error.as_str())),
                Outcome::Release => (RELEASE, 0, None),
                Outcome::Cancel => (CANCEL, 0, None),
                Outcome::Snooze { delay } => (SNOOZE, millis(*delay), None),
                Outcome::Ack => unreachable!("acks were partitioned out"),
            };
            // The history's copy only when it is shorter: a short error is sent once.
            let kept = error.and_then(|e| Some(bounded_error(e)).filter(|k| k.len() < e.len()));
            query = query
                .bind(s.job.0)
                .bind(s.lease.0)
                .bind(kind)
                .bind(delay_ms)
                .bind(error)
                .bind(kept);
        }
        touched += query
            .bind(now)
            .bind(now)
            .bind(now)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(touched)
}
