//! Groups: jobs enqueued as members of a named group ([`NewJob::group`]), and a completion
//! job the broker enqueues once, when the group is sealed ([`Broker::seal_group`]) and
//! every member has settled: completed, died or was cancelled (or purged). Retries,
//! snoozes, releases and expired leases do not settle a member; a member re-driven after it
//! died was already counted, and is not counted again.
//!
//! The broker counts members in the same step that settles them, so the completion job is
//! enqueued exactly once however many workers settle members at once, and whichever of
//! them (or the seal) settles the last. The completion job carries the group's outcome in
//! its headers ([`GroupOutcome::of`]); [`Broker::group`] gives the ids of the members that
//! died.
//!
//! A group's members are enqueued in any number of batches, each one round trip
//! ([`Broker::enqueue_group`] does it in chunks), before the seal; a sealed group takes no
//! more.
//!
//! [`Broker::seal_group`]: crate::Broker::seal_group
//! [`Broker::group`]: crate::Broker::group
//! [`Broker::enqueue_group`]: crate::Broker::enqueue_group

use crate::error::{ConfigError, Result};
use crate::job::{Job, JobId, NewJob};
pub use crate::job::{MAX_GROUP, validate_group};

/// Header of a completion job: the group's name.
pub const GROUP_HEADER: &str = "hopper-group";
/// Header of a completion job: how many members the group had.
pub const MEMBERS_HEADER: &str = "hopper-group-members";
/// Header of a completion job: how many members completed.
pub const SUCCEEDED_HEADER: &str = "hopper-group-succeeded";
/// Header of a completion job: how many members died.
pub const DEAD_HEADER: &str = "hopper-group-dead";
/// Header of a completion job: how many members were cancelled or purged.
pub const CANCELLED_HEADER: &str = "hopper-group-cancelled";

/// Members enqueued per round trip by [`Broker::enqueue_group`](crate::Broker::enqueue_group).
pub const GROUP_CHUNK: usize = 1_000;

/// A group as the broker counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// The group's name.
    pub group: String,
    /// Members enqueued.
    pub members: u64,
    /// Members that completed.
    pub succeeded: u64,
    /// Members that died, by id, in the order they died.
    pub dead: Vec<JobId>,
    /// Members cancelled or purged.
    pub cancelled: u64,
    /// Whether the group takes no more members and has its completion job.
    pub sealed: bool,
    /// The completion job, once enqueued.
    pub completion: Option<JobId>,
}

impl GroupStatus {
    /// Members that have not settled yet.
    pub fn unsettled(&self) -> u64 {
        let settled = self.succeeded + self.dead.len() as u64 + self.cancelled;
        self.members.saturating_sub(settled)
    }

    /// What the completion job is told.
    pub fn outcome(&self) -> GroupOutcome {
        GroupOutcome {
            group: self.group.clone(),
            members: self.members,
            succeeded: self.succeeded,
            dead: self.dead.len() as u64,
            cancelled: self.cancelled,
        }
    }
}

/// What a completion job learns of its group, from its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOutcome {
    /// The group's name.
    pub group: String,
    /// Members enqueued.
    pub members: u64,
    /// Members that completed.
    pub succeeded: u64,
    /// Members that died ([`Broker::group`](crate::Broker::group) gives their ids).
    pub dead: u64,
    /// Members cancelled or purged.
    pub cancelled: u64,
}

impl GroupOutcome {
    /// The outcome a completion job carries; `None` for a job that is not one.
    pub fn of(job: &Job) -> Option<Self> {
        let count = |name: &str| job.headers.get(name)?.parse().ok();
        Some(GroupOutcome {
            group: job.headers.get(GROUP_HEADER)?.clone(),
            members: count(MEMBERS_HEADER)?,
            succeeded: count(SUCCEEDED_HEADER)?,
            dead: count(DEAD_HEADER)?,
            cancelled: count(CANCELLED_HEADER)?,
        })
    }

    /// `completion` with this outcome in its headers, as the broker enqueues it.
    pub fn stamp(&self, mut completion: NewJob) -> NewJob {
        let h = &mut completion.headers;
        h.insert(GROUP_HEADER.into(), self.group.clone());
        h.insert(MEMBERS_HEADER.into(), self.members.to_string());
        h.insert(SUCCEEDED_HEADER.into(), self.succeeded.to_string());
        h.insert(DEAD_HEADER.into(), self.dead.to_string());
        h.insert(CANCELLED_HEADER.into(), self.cancelled.to_string());
        completion
    }
}

/// The refusal of a member of `group`, which is sealed: every broker answers it, storing
/// nothing of the batch.
pub fn closed_to_members(group: &str) -> crate::Error {
    let allowed = "a group not sealed yet: a sealed group takes no more members";
    ConfigError::new("group", group.escape_debug(), allowed).into()
}

/// The refusal of a second seal of `group`.
pub fn sealed_already(group: &str) -> crate::Error {
    let allowed = "a group not sealed yet: it has its completion job";
    ConfigError::new("group", group.escape_debug(), allowed).into()
}

/// Checks a completion job before a broker seals a group with it: a job like any other,
/// but not itself a member, nor holding keys whose rules would let it be dropped or held
/// back.
pub fn validate_completion(group: &str, completion: &NewJob) -> Result<()> {
    validate_group(group)?;
    crate::job::CheckedJobs::check(vec![completion.clone()])?;
    if completion.group.is_some() || completion.unique.is_some() {
        let allowed = "a completion job without a group or unique key of its own";
        return Err(ConfigError::new("completion", group.escape_debug(), allowed).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::LeaseId;

    fn job_from(new: NewJob) -> Job {
        Job {
            id: JobId(1),
            queue: new.queue,
            payload: new.payload,
            priority: 0,
            run_at: 0,
            attempt: 0,
            max_attempts: 1,
            headers: new.headers,
            created_at: 0,
            lease: LeaseId(0),
        }
    }

    #[test]
    fn an_outcome_reads_back_from_the_headers_it_stamps() {
        let outcome = GroupOutcome {
            group: "import-7".into(),
            members: 10,
            succeeded: 7,
            dead: 2,
            cancelled: 1,
        };
        let new = outcome.stamp(NewJob::new("done", "x").header("mine", "kept"));
        let job = job_from(new);
        assert_eq!(GroupOutcome::of(&job), Some(outcome));
        assert_eq!(job.headers["mine"], "kept");
        let plain = job_from(NewJob::new("q", "x"));
        assert_eq!(GroupOutcome::of(&plain), None);
    }

    #[test]
    fn bad_names_and_completions_are_refused_by_name() {
        assert_eq!(validate_group("").unwrap_err().setting, "group");
        assert_eq!(validate_group("a\0b").unwrap_err().setting, "group");
        let long = "g".repeat(MAX_GROUP + 1);
        assert_eq!(validate_group(&long).unwrap_err().setting, "group");
        assert!(validate_group(&"g".repeat(MAX_GROUP)).is_ok());
        let member = NewJob::new("q", "x").group("other");
        let e = validate_completion("g", &member).unwrap_err();
        assert!(e.to_string().contains("completion"), "{e}");
        let unique = NewJob::new("q", "x").unique_key("k");
        assert!(validate_completion("g", &unique).is_err());
        assert!(validate_completion("g", &NewJob::new("q", "x")).is_ok());
    }
}
