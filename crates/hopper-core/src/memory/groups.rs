//! Groups on the memory broker ([`crate::group`]): each group's counts and sealed
//! completion job, and which group each unsettled member belongs to.

use std::collections::HashMap;

use crate::error::Result;
use crate::group::GroupStatus;
use crate::job::{IdMap, JobId, NewJob};

/// How a member settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    Succeeded,
    Dead,
    Cancelled,
}

#[derive(Debug)]
struct Group {
    status: GroupStatus,
    /// The completion job, from the seal until it is enqueued.
    completion: Option<NewJob>,
}

#[derive(Debug, Default)]
pub(super) struct Groups {
    groups: Vec<Group>,
    by_name: HashMap<String, u32>,
    /// Each member not settled yet, and its group's place in `groups`.
    members: IdMap<JobId, u32>,
}

impl Groups {
    /// Refuses a batch with a member of a sealed group, by name, before anything is stored.
    pub(super) fn check_open(&self, jobs: &[NewJob]) -> Result<()> {
        if self.groups.is_empty() {
            return Ok(());
        }
        for group in jobs.iter().filter_map(|j| j.group.as_deref()) {
            if self.get(group).is_some_and(|g| g.status.sealed) {
                return Err(crate::group::closed_to_members(group));
            }
        }
        Ok(())
    }

    fn get(&self, group: &str) -> Option<&Group> {
        self.by_name.get(group).map(|&i| &self.groups[i as usize])
    }

    fn place(&mut self, group: &str) -> u32 {
        if let Some(&i) = self.by_name.get(group) {
            return i;
        }
        let i = self.groups.len() as u32;
        self.groups.push(Group {
            status: GroupStatus {
                group: group.to_owned(),
                members: 0,
                succeeded: 0,
                dead: Vec::new(),
                cancelled: 0,
                sealed: false,
                completion: None,
            },
            completion: None,
        });
        self.by_name.insert(group.to_owned(), i);
        i
    }

    /// Counts `id` as a member of `group`.
    pub(super) fn join(&mut self, group: &str, id: JobId) {
        let i = self.place(group);
        self.groups[i as usize].status.members += 1;
        self.members.insert(id, i);
    }

    /// Counts a member as settled; returns the completion job to enqueue when it was the
    /// last of a sealed group, with its group's place for [`fired`](Self::fired).
    pub(super) fn ended(&mut self, id: JobId, how: Ended) -> Option<(u32, NewJob)> {
        if self.members.is_empty() {
            return None;
        }
        let i = self.members.remove(&id)?;
        let status = &mut self.groups[i as usize].status;
        match how {
            Ended::Succeeded => status.succeeded += 1,
            Ended::Dead => status.dead.push(id),
            Ended::Cancelled => status.cancelled += 1,
        }
        self.due(i)
    }

    /// The completion job of group `i`, when it is sealed, settled and not yet enqueued.
    fn due(&mut self, i: u32) -> Option<(u32, NewJob)> {
        let group = &mut self.groups[i as usize];
        if !group.status.sealed || group.status.unsettled() > 0 {
            return None;
        }
        let completion = group.completion.take()?;
        Some((i, group.status.outcome().stamp(completion)))
    }

    /// Records the completion job enqueued for group `i`.
    pub(super) fn fired(&mut self, i: u32, id: JobId) {
        self.groups[i as usize].status.completion = Some(id);
    }

    /// Seals `group` with `completion`; returns the completion job to enqueue at once when
    /// every member has already settled. A sealed group is refused by name.
    pub(super) fn seal(
        &mut self,
        group: &str,
        completion: NewJob,
    ) -> Result<Option<(u32, NewJob)>> {
        let i = self.place(group);
        let g = &mut self.groups[i as usize];
        if g.status.sealed {
            return Err(crate::group::sealed_already(group));
        }
        g.status.sealed = true;
        g.completion = Some(completion);
        Ok(self.due(i))
    }

    pub(super) fn status(&self, group: &str) -> Option<GroupStatus> {
        self.get(group).map(|g| g.status.clone())
    }
}
