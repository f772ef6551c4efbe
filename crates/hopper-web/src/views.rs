//! What the API answers, as JSON: queues, jobs, pages, workers and the broker's abilities.
//! Times are milliseconds since the Unix epoch; payloads are shown as JSON when they parse,
//! else as text when they are UTF-8, else as hex.

use std::collections::BTreeMap;

use hopper::registry::{Bucket, QueueBeat};
use hopper::{AttemptError, GroupStatus, JobRecord, QueueStatus, Throughput, WorkerInfo};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Completed, failed and dead-lettered attempts over a window.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Rates {
    pub completed: u64,
    pub failed: u64,
    pub dead: u64,
}

impl From<Throughput> for Rates {
    fn from(t: Throughput) -> Self {
        Rates {
            completed: t.completed,
            failed: t.failed,
            dead: t.dead,
        }
    }
}

/// A queue: its jobs by state, lag, pause, consumers and recent throughput.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueView {
    pub queue: String,
    pub pending: u64,
    pub scheduled: u64,
    pub leased: u64,
    pub dead: u64,
    /// Where counts are bounded: a count of this plus one means more than this.
    pub bound: Option<u64>,
    /// How long the oldest due job has waited, in ms; absent with none due.
    pub lag_ms: Option<u64>,
    pub paused: bool,
    /// Consumers (RabbitMQ) or live workers taking the queue (brokers that list workers).
    pub consumers: Option<u64>,
    /// Absent where the broker keeps no throughput.
    pub last_minute: Option<Rates>,
    pub last_hour: Option<Rates>,
    /// At most `max` of its jobs start in any window of `per_ms`; absent without a limit.
    pub rate_limit: Option<RateLimitView>,
}

/// A queue's rate limit.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct RateLimitView {
    pub max: u32,
    pub per_ms: u64,
    /// The limit holds for each rate key of the queue's jobs, not the queue as a whole.
    pub per_key: bool,
}

impl From<QueueStatus> for QueueView {
    fn from(s: QueueStatus) -> Self {
        QueueView {
            queue: s.queue,
            pending: s.counts.pending,
            scheduled: s.counts.scheduled,
            leased: s.counts.leased,
            dead: s.counts.dead,
            bound: s.bound,
            lag_ms: s.lag.map(|d| d.as_millis() as u64),
            paused: s.paused,
            consumers: s.consumers,
            last_minute: s.last_minute.map(Rates::from),
            last_hour: s.last_hour.map(Rates::from),
            rate_limit: s.rate_limit.map(|l| RateLimitView {
                max: l.max,
                per_ms: l.per.as_millis() as u64,
                per_key: l.per_key,
            }),
        }
    }
}

/// What was settled in one 10-second bucket.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct BucketView {
    /// The bucket's start.
    pub at: i64,
    pub completed: u64,
    pub failed: u64,
    pub dead: u64,
}

impl From<Bucket> for BucketView {
    fn from(b: Bucket) -> Self {
        BucketView {
            at: b.at,
            completed: b.counts.completed,
            failed: b.counts.failed,
            dead: b.counts.dead,
        }
    }
}

/// A queue with its throughput over the last hour, bucket by bucket.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueDetail {
    #[serde(flatten)]
    pub status: QueueView,
    /// Oldest first; buckets that settled nothing are left out. Empty where the broker
    /// keeps no throughput.
    pub throughput: Vec<BucketView>,
}

/// The error of one failed attempt.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptView {
    pub attempt: u32,
    pub at: i64,
    pub error: String,
}

impl From<&AttemptError> for AttemptView {
    fn from(e: &AttemptError) -> Self {
        AttemptView {
            attempt: e.attempt,
            at: e.at,
            error: e.error.clone(),
        }
    }
}

/// A job with everything the broker keeps of it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobView {
    pub id: i64,
    pub queue: String,
    /// pending, leased, dead, completed or cancelled.
    pub state: String,
    pub priority: i32,
    /// Attempts charged so far.
    pub attempt: u32,
    pub max_attempts: u32,
    pub created_at: i64,
    pub run_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The unique key it was enqueued with, if any.
    pub unique_key: Option<String>,
    /// Its ordering key, if any: jobs of the queue with the same key run one at a time.
    pub ordering_key: Option<String>,
    /// Pending behind an earlier job of its ordering key.
    pub blocked: bool,
    /// Its rate key, if any: under a limit per key, its starts count in that key's window.
    pub rate_key: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// The payload, when it is JSON.
    #[schema(value_type = Option<Object>)]
    pub payload_json: Option<serde_json::Value>,
    /// The payload as text, when it is UTF-8 but not JSON.
    pub payload_text: Option<String>,
    /// The payload as hex, when it is not UTF-8.
    pub payload_hex: Option<String>,
    pub payload_bytes: usize,
    pub last_error: Option<String>,
    /// The latest failed attempts' errors, oldest first.
    pub errors: Vec<AttemptView>,
}

impl From<&JobRecord> for JobView {
    fn from(r: &JobRecord) -> Self {
        let j = &r.job;
        let (mut json, mut text, mut hex) = (None, None, None);
        match serde_json::from_slice::<serde_json::Value>(&j.payload) {
            Ok(v) => json = Some(v),
            Err(_) => match std::str::from_utf8(&j.payload) {
                Ok(s) => text = Some(s.to_owned()),
                Err(_) => hex = Some(j.payload.iter().map(|b| format!("{b:02x}")).collect()),
            },
        }
        JobView {
            id: j.id.0,
            queue: j.queue.clone(),
            state: r.state.name().to_owned(),
            priority: j.priority,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
            created_at: j.created_at,
            run_at: j.run_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            unique_key: r.unique_key.clone(),
            ordering_key: r.ordering_key.clone(),
            rate_key: r.rate_key.clone(),
            blocked: r.blocked,
            headers: j.headers.clone(),
            payload_json: json,
            payload_text: text,
            payload_hex: hex,
            payload_bytes: j.payload.len(),
            last_error: r.last_error.clone(),
            errors: r.errors.iter().map(AttemptView::from).collect(),
        }
    }
}

/// A page of a queue's jobs in one state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PageView {
    pub jobs: Vec<JobView>,
    /// Pass as `after` for the next page; absent when this page was not full.
    pub next: Option<String>,
}

/// One queue of a live worker.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerQueueView {
    pub queue: String,
    pub concurrency: usize,
    pub held: usize,
    pub running: usize,
    pub window: usize,
    pub paused: bool,
    /// When the earliest lease the worker holds expires, where it renews leases.
    pub lease_expires_at: Option<i64>,
}

impl From<&QueueBeat> for WorkerQueueView {
    fn from(q: &QueueBeat) -> Self {
        WorkerQueueView {
            queue: q.queue.clone(),
            concurrency: q.concurrency,
            held: q.held,
            running: q.running,
            window: q.window,
            paused: q.paused,
            lease_expires_at: q.lease_expires_at,
        }
    }
}

/// A live worker.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub expires_at: i64,
    pub queues: Vec<WorkerQueueView>,
    /// Its schedules of periodic jobs.
    pub schedules: Vec<ScheduleView>,
}

/// A schedule of periodic jobs a worker holds.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleView {
    pub name: String,
    /// The queue its jobs go to.
    pub queue: String,
    /// Its cron expression and time zone, or its interval.
    pub spec: String,
    /// Its next slot (ms since the epoch).
    pub next_at: Option<i64>,
    /// The latest slot the worker enqueued or found enqueued (ms since the epoch).
    pub last_at: Option<i64>,
}

impl From<&hopper::ScheduleBeat> for ScheduleView {
    fn from(s: &hopper::ScheduleBeat) -> Self {
        ScheduleView {
            name: s.name.clone(),
            queue: s.queue.clone(),
            spec: s.spec.clone(),
            next_at: s.next_at,
            last_at: s.last_at,
        }
    }
}

impl From<&WorkerInfo> for WorkerView {
    fn from(w: &WorkerInfo) -> Self {
        WorkerView {
            id: w.id.clone(),
            host: w.host.clone(),
            pid: w.pid,
            started_at: w.started_at,
            heartbeat_at: w.heartbeat_at,
            expires_at: w.expires_at,
            queues: w.queues.iter().map(WorkerQueueView::from).collect(),
            schedules: w.schedules.iter().map(ScheduleView::from).collect(),
        }
    }
}

/// The broker and what it serves, and the session's token for state-changing calls.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionView {
    /// The broker's name (memory, sqlite, postgres, mysql, amqp).
    pub broker: String,
    /// Send as the `x-hopper-csrf` header with every POST (a bearer token does instead).
    pub csrf: String,
    /// Every action is refused.
    pub read_only: bool,
    /// Jobs can be listed by state.
    pub list: bool,
    /// Dead letters can be retried and discarded.
    pub redrive: bool,
    /// Queues can be paused for every worker.
    pub pause: bool,
    /// Queue names and statistics.
    pub stats: bool,
    /// Throughput over the last minute and hour.
    pub throughput: bool,
    /// Live workers.
    pub workers: bool,
}

/// How many jobs (or queues) an action changed.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Changed {
    pub changed: u64,
}

/// Which dead letters of a queue an action takes: these ids, or all of them.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DeadSelection {
    pub ids: Option<Vec<i64>>,
    pub all: Option<bool>,
}

/// A group of jobs: its members by outcome, the ids of those that died (in the order they
/// died), and its completion job once enqueued.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GroupView {
    pub group: String,
    pub members: u64,
    pub succeeded: u64,
    pub dead: Vec<i64>,
    pub cancelled: u64,
    /// Members not settled yet.
    pub unsettled: u64,
    /// Whether the group takes no more members and has its completion job.
    pub sealed: bool,
    /// The completion job's id, once enqueued.
    pub completion: Option<i64>,
}

impl From<&GroupStatus> for GroupView {
    fn from(s: &GroupStatus) -> Self {
        GroupView {
            group: s.group.clone(),
            members: s.members,
            succeeded: s.succeeded,
            dead: s.dead.iter().map(|id| id.0).collect(),
            cancelled: s.cancelled,
            unsettled: s.unsettled(),
            sealed: s.sealed,
            completion: s.completion.map(|id| id.0),
        }
    }
}
