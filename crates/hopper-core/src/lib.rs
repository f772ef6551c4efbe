//! Hopper's core: the job model, the broker traits, the worker runtime and the in-process
//! broker. It depends on no backend; brokers live in their own crates.
//!
//! # Layout
//! - [`job`]: [`NewJob`] as producers make it, [`Job`] as workers hold it, times.
//! - [`id`]: [`JobId`] and [`LeaseId`], minted by brokers.
//! - [`admin`]: what operators ask: listings by cursor, re-drives, pauses, statistics.
//! - [`broker`]: the [`Broker`] trait, fetch requests, settlements and capabilities.
//! - [`prefetch`]: the fetch policies ([`Prefetch`]) and the adaptive [`AutoSizer`].
//! - [`retry`]: [`RetryPolicy`], exponential backoff with jitter.
//! - [`group`]: groups of jobs and their completion job.
//! - [`schedule`]: periodic jobs ([`Schedule`]), by cron expression or interval.
//! - [`worker`]: the [`Worker`] runtime: event loop, elastic pool, settlements, leases.
//! - `metering`: the enqueue counter, and whether a metrics recorder is installed.
//! - [`memory`]: the in-process broker and its topics.
//! - [`clock`]: where brokers read the time, so tests can run on tokio's paused clock.
//! - [`url`]: [`redact_url`], so passwords in broker URLs never reach logs.
//! - [`error`]: [`Error`] and [`ConfigError`].

pub mod admin;
pub mod broker;
pub mod clock;
pub mod deadline;
pub mod error;
pub mod group;
pub mod id;
pub mod job;
pub mod memory;
mod metering;
pub mod prefetch;
pub mod rate;
pub mod registry;
pub mod retry;
pub mod schedule;
pub mod url;
pub mod worker;

pub use admin::{
    AttemptError, Cursor, JobPage, JobQuery, ListState, QueueStatus, Selection, Throughput,
};
pub use broker::{
    AdminCalls, Broker, Budget, CancelOutcome, Capabilities, CheckedJobs, FetchRequest, Fetched,
    JobRecord, JobState, Outcome, QueueCounts, SettleReport, Settlement,
};
pub use clock::{CONNECT_TIMEOUT, Clock, connect_within};
pub use deadline::{answer_limit, answer_within};
pub use error::{Chain, ConfigError, Error, Result};
pub use group::{GroupOutcome, GroupStatus};
pub use job::{
    Enqueued, Job, JobCopy, JobId, LeaseId, Limits, Millis, NewJob, RunAt, UniqueKey, UniqueScope,
};
pub use memory::MemoryBroker;
pub use prefetch::{AutoSizer, Prefetch};
pub use rate::RateLimit;
pub use registry::{Bucket, QueueBeat, ScheduleBeat, ScheduleInfo, WorkerBeat, WorkerInfo};
pub use retry::RetryPolicy;
pub use schedule::{Missed, Schedule};
pub use url::{BrokerUrl, redact_url};
pub use worker::{
    JobContext, JobError, JobResult, QueueOptions, QueueStats, Worker, WorkerBuilder, WorkerCounts,
    WorkerStats, sample_queue_metrics, set_queue_gauges,
};
