//! New jobs checked once, in core, before any broker sees them.

use super::{Limits, NewJob};
use crate::error::Result;

/// New jobs that passed [`NewJob::validate`], as [`Broker::enqueue`](crate::Broker::enqueue) hands them to
/// [`Broker::enqueue_checked`](crate::Broker::enqueue_checked): a broker stores them without checking them again.
///
/// Only [`CheckedJobs::check`] makes one, so a broker that receives it knows every job
/// was checked once, in core, before any broker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedJobs(Vec<NewJob>);

impl CheckedJobs {
    /// Checks each job within the default [`Limits`]; the first that fails is the error,
    /// and no job is accepted.
    pub fn check(jobs: Vec<NewJob>) -> Result<Self> {
        Self::check_within(jobs, &Limits::default())
    }

    /// Checks each job within a broker's `limits`; the first that fails is the error, and
    /// no job is accepted.
    pub fn check_within(jobs: Vec<NewJob>, limits: &Limits) -> Result<Self> {
        for job in &jobs {
            job.validate_within(limits)?;
        }
        Ok(CheckedJobs(jobs))
    }

    /// The jobs, in the order given.
    pub fn into_vec(self) -> Vec<NewJob> {
        self.0
    }
}

impl std::ops::Deref for CheckedJobs {
    type Target = [NewJob];

    fn deref(&self) -> &[NewJob] {
        &self.0
    }
}

impl IntoIterator for CheckedJobs {
    type Item = NewJob;
    type IntoIter = std::vec::IntoIter<NewJob>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
