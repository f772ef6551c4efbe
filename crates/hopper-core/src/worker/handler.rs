//! What user code looks like to the runtime: handlers, batch handlers, and the errors they
//! return to steer a job.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use futures_util::FutureExt;
use serde::de::DeserializeOwned;

use crate::job::Job;

/// A job handed to a handler: its decoded payload and everything else about it.
#[derive(Debug)]
pub struct JobContext<T> {
    /// The decoded payload.
    pub payload: T,
    /// The job itself: id, attempt, headers, lease…
    pub job: Job,
}

/// Why a handler did not finish its job, and what should happen to it.
///
/// Any `std::error::Error` converts into a plain retry, so `?` works in handlers.
pub struct JobError {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// Retry per the retry policy, or after the given delay.
    Retry(Option<Duration>),
    /// Dead-letter now, whatever attempts are left.
    Discard,
    /// Back to the queue after the delay, the attempt not charged.
    Snooze(Duration),
}

impl JobError {
    /// A failed attempt: retried after the policy's backoff, dead-lettered after the last.
    pub fn retry(error: impl fmt::Display) -> Self {
        JobError {
            kind: ErrorKind::Retry(None),
            message: error.to_string(),
        }
    }

    /// A failed attempt retried after `delay` instead of the policy's backoff.
    pub fn retry_after(error: impl fmt::Display, delay: Duration) -> Self {
        JobError {
            kind: ErrorKind::Retry(Some(delay)),
            message: error.to_string(),
        }
    }

    /// Gives up on the job now: it goes to the dead letters with this error.
    pub fn discard(error: impl fmt::Display) -> Self {
        JobError {
            kind: ErrorKind::Discard,
            message: error.to_string(),
        }
    }

    /// Puts the job off for `delay` (River's snooze): it goes back to its queue, runs
    /// again once `delay` has passed, and this attempt is not charged, so a job may snooze
    /// any number of times. For work that is not ready yet (an upstream still busy, a
    /// quota not yet refilled), not for failures.
    /// A delay past [`MAX_DELAY`](crate::job::MAX_DELAY) waits that long.
    pub fn snooze(delay: Duration) -> Self {
        let delay = delay.min(crate::job::MAX_DELAY);
        JobError {
            kind: ErrorKind::Snooze(delay),
            message: format!("snoozed for {delay:?}"),
        }
    }

    /// The error message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobError({:?}: {})", self.kind, self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(e: E) -> Self {
        JobError::retry(e)
    }
}

/// What a handler returns.
pub type JobResult = Result<(), JobError>;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One job's handler with its payload type known: what [`ErasedHandler`] runs, job after
/// job, without boxing each job's future.
pub(crate) trait OneHandler: Send + Sync + 'static {
    type Fut: Future<Output = JobResult> + Send;

    /// The job's future; `Err` carries the decoder's message when the payload does not
    /// decode, and the job never reaches user code. A panic in the closure's body, before
    /// its first `.await`, unwinds out of here for the caller to catch.
    fn call(&self, job: Job) -> Result<Self::Fut, String>;
}

/// A batch handler with the payload type erased. Jobs whose payload does not decode are
/// returned apart, with their error.
pub(crate) trait ErasedBatchHandler: Send + Sync {
    #[allow(clippy::type_complexity)]
    fn call(&self, jobs: Vec<Job>) -> (BoxFuture<Vec<JobResult>>, Vec<Job>, Vec<(Job, String)>);
}

pub(crate) struct FnHandler<T, F> {
    pub(crate) f: F,
    pub(crate) _t: std::marker::PhantomData<fn() -> T>,
}

impl<T, F, Fut> OneHandler for FnHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(JobContext<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = JobResult> + Send + 'static,
{
    type Fut = Fut;

    fn call(&self, job: Job) -> Result<Fut, String> {
        match serde_json::from_slice::<T>(&job.payload) {
            Ok(payload) => Ok((self.f)(JobContext { payload, job })),
            Err(e) => Err(format!("payload does not decode: {e}")),
        }
    }
}

impl<T, F, Fut> ErasedBatchHandler for FnHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Vec<JobContext<T>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<JobResult>> + Send + 'static,
{
    fn call(&self, jobs: Vec<Job>) -> (BoxFuture<Vec<JobResult>>, Vec<Job>, Vec<(Job, String)>) {
        let mut good = Vec::with_capacity(jobs.len());
        let mut kept = Vec::with_capacity(jobs.len());
        let mut bad = Vec::new();
        for job in jobs {
            match serde_json::from_slice::<T>(&job.payload) {
                Ok(payload) => {
                    kept.push(job.clone());
                    good.push(JobContext { payload, job });
                }
                Err(e) => bad.push((job, format!("payload does not decode: {e}"))),
            }
        }
        (call_deferring_panic(|| (self.f)(good)), kept, bad)
    }
}

/// Runs a handler future, turning a panic into a failed attempt.
pub(crate) async fn run_caught<F: Future>(fut: F) -> Result<F::Output, String> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(panic_message)
}

/// Calls a handler's closure. A panic in its body, before the future's first `.await`,
/// becomes a future that panics with it when polled, so [`run_caught`] makes it a failed
/// attempt as it does a panic in the future.
fn call_deferring_panic<Fut>(call: impl FnOnce() -> Fut) -> BoxFuture<Fut::Output>
where
    Fut: Future + Send + 'static,
{
    match std::panic::catch_unwind(AssertUnwindSafe(call)) {
        Ok(fut) => Box::pin(fut),
        Err(panic) => Box::pin(rethrow(panic)),
    }
}

async fn rethrow<T>(panic: Box<dyn std::any::Any + Send>) -> T {
    std::panic::resume_unwind(panic)
}

pub(crate) fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    format!("handler panicked: {msg}")
}
