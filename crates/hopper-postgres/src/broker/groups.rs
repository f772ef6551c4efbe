//! Groups ([`hopper_core::group`]): members stored with their group (enqueue_group.sql),
//! counted by the very statement that ends them (settle.sql, claim.sql's reaper,
//! cancel.sql, purge.sql, each calling hopper_group_count), and the completion job
//! enqueued under the group's row lock once it is sealed and has nothing unsettled, at
//! most once (`completion_id`; see 0012_groups.sql).
//!
//! Counting in the statement that ends a member means a member is counted if and only if
//! its end commits: a completed member's row is deleted by that statement, so a count lost
//! could never be made again. Firing in it too leaves no window between the two; the
//! background sweep ([`PgBroker::sweep_groups`]) is a backstop all the same, for a group
//! left sealed and settled without its job (say, by hand).

use hopper_core::group::validate_completion;
use hopper_core::{Broker, CheckedJobs, GroupStatus, JobId, NewJob, Result};

use super::{PgBroker, db_err};

/// How many groups one sweep fires at most.
const GROUPS_PER_SWEEP: i64 = 1000;

impl PgBroker {
    /// [`Broker::seal_group`](hopper_core::Broker::seal_group).
    pub(super) async fn seal(&self, group: &str, completion: NewJob) -> Result<GroupStatus> {
        validate_completion(group, &completion)?;
        let checked = CheckedJobs::check_within(vec![completion], &self.limits())?;
        let completion = checked.into_iter().next().expect("one job checked");
        // Reckoned when the job is enqueued: an `At` time, or a delay from then.
        let (run_at, delay_ms) = completion.run_at_parts(None);
        let mut held = self.inner.conns.get().await?;
        let sealed: bool = sqlx::query_scalar(&self.inner.sql.group_seal)
            .bind(group)
            .bind(&completion.queue)
            .bind(&completion.payload)
            .bind(completion.priority)
            .bind(run_at)
            .bind(delay_ms)
            .bind(completion.max_attempts.min(i32::MAX as u32) as i32)
            .bind(completion.headers_json())
            .bind(&completion.ordering_key)
            .bind(self.now())
            .bind(&self.inner.channel)
            .fetch_one(held.conn())
            .await
            .map_err(|e| held.fail("sealing a group", e))?;
        if !sealed {
            return Err(hopper_core::group::sealed_already(group));
        }
        let status = read_status(&self.inner.sql.group_status, held.conn(), group)
            .await?
            .expect("sealed above");
        drop(held);
        if status.completion.is_some() {
            self.bump();
        }
        Ok(status)
    }

    /// [`Broker::group`](hopper_core::Broker::group).
    pub(super) async fn group_status(&self, group: &str) -> Result<Option<GroupStatus>> {
        hopper_core::group::validate_group(group)?;
        let mut held = self.inner.conns.get().await?;
        read_status(&self.inner.sql.group_status, held.conn(), group).await
    }

    /// Enqueues the completion jobs of sealed groups left with nothing unsettled and none
    /// enqueued, at most [`GROUPS_PER_SWEEP`], from the background round that prunes unique
    /// keys. Returns how many it enqueued.
    pub(super) async fn sweep_groups(&self) -> Result<u64> {
        let mut held = self.inner.conns.get().await?;
        let n: Option<i32> = sqlx::query_scalar(&self.inner.sql.group_sweep)
            .bind(GROUPS_PER_SWEEP)
            .bind(self.now())
            .bind(&self.inner.channel)
            .fetch_one(held.conn())
            .await
            .map_err(db_err("sweeping groups"))?;
        let n = n.unwrap_or(0).max(0) as u64;
        if n > 0 {
            self.bump();
        }
        Ok(n)
    }
}

async fn read_status(
    sql: &str,
    conn: &mut sqlx::postgres::PgConnection,
    group: &str,
) -> Result<Option<GroupStatus>> {
    type Row = (i64, i64, i64, bool, Option<i64>, Vec<i64>);
    let row: Option<Row> = sqlx::query_as(sql)
        .bind(group)
        .fetch_optional(conn)
        .await
        .map_err(db_err("reading a group"))?;
    Ok(row.map(
        |(members, succeeded, cancelled, sealed, completion, dead)| GroupStatus {
            group: group.to_owned(),
            members: members.max(0) as u64,
            succeeded: succeeded.max(0) as u64,
            dead: dead.into_iter().map(JobId).collect(),
            cancelled: cancelled.max(0) as u64,
            sealed,
            completion: completion.map(JobId),
        },
    ))
}
