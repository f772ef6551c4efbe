//! Live workers and recent throughput, as brokers that store records keep them.
//!
//! A running worker reports itself every few seconds with a [`WorkerBeat`]: who it is
//! (host, pid, queues, concurrency, what it holds) and what it settled since its last
//! report. The broker keeps the worker until its report expires, and adds the settled
//! counts to per-queue buckets of [`BUCKET`], which give [`QueueStatus`]'s last minute and
//! last hour and a dashboard's chart. A worker that stops gracefully removes itself; one
//! that dies drops out when its report expires.
//!
//! [`QueueStatus`]: crate::admin::QueueStatus

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::admin::Throughput;
use crate::error::ConfigError;
use crate::job::Millis;

/// How often a worker reports itself by default.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// How many report intervals a report lasts: a worker is listed until this many of its
/// reports in a row went missing.
pub const MISSED_BEATS: u32 = 6;

/// The span of one throughput bucket.
pub const BUCKET: Duration = Duration::from_secs(10);

/// How far back brokers keep throughput buckets: the last hour, and the bucket running.
pub const KEPT: Duration = Duration::from_secs(3600 + 10);

/// The most fetch sizes one report carries per queue: enough to show an adaptive window
/// growing from one (1 1 2 2 4 4 8 8 16 …) between two reports.
pub const FETCHES_PER_REPORT: usize = 64;

/// The longest `id` or `host` a report may carry, in bytes.
pub const MAX_NAME: usize = 200;

/// What a worker says of one of its queues.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueBeat {
    /// The queue.
    pub queue: String,
    /// The most of its jobs (or batches) the worker runs at once.
    pub concurrency: usize,
    /// Jobs of it the worker holds: fetched and not started, or running.
    pub held: usize,
    /// Of those, the ones running.
    pub running: usize,
    /// How many jobs the worker lets itself hold now (its prefetch window).
    pub window: usize,
    /// Whether the worker stopped taking it ([`Worker::pause`](crate::Worker::pause)).
    pub paused: bool,
    /// The sizes of its fetches since the previous report, in order: the first
    /// [`FETCHES_PER_REPORT`] of them. On a pushed broker, the batches handed to handlers.
    #[serde(default)]
    pub fetches: Vec<u32>,
    /// When the earliest lease the worker holds expires (ms since the epoch), on brokers
    /// whose leases it renews; the same for each of its queues.
    #[serde(default)]
    pub lease_expires_at: Option<Millis>,
}

/// What a worker says of one of its schedules ([`crate::Schedule`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleBeat {
    /// The schedule's name.
    pub name: String,
    /// The queue its jobs go to.
    pub queue: String,
    /// Its cron expression and time zone, or its interval.
    pub spec: String,
    /// Its next slot (ms since the epoch), if there is one.
    #[serde(default)]
    pub next_at: Option<Millis>,
    /// The latest slot it enqueued or found enqueued (ms since the epoch), since it started.
    #[serde(default)]
    pub last_at: Option<Millis>,
}

/// One schedule as the live workers holding it report it together: the earliest next
/// slot, the latest slot enqueued, and how many workers hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    /// The schedule as the first worker (oldest first) reports it.
    pub schedule: ScheduleBeat,
    /// How many live workers hold a schedule of that name.
    pub workers: usize,
}

/// The schedules of `workers`, merged by name, in name order.
pub fn schedules(workers: &[WorkerInfo]) -> Vec<ScheduleInfo> {
    let mut by_name = std::collections::BTreeMap::<&str, ScheduleInfo>::new();
    for beat in workers.iter().flat_map(|w| &w.schedules) {
        let info = by_name.entry(&beat.name).or_insert_with(|| ScheduleInfo {
            schedule: ScheduleBeat {
                next_at: None,
                last_at: None,
                ..beat.clone()
            },
            workers: 0,
        });
        info.workers += 1;
        let s = &mut info.schedule;
        s.next_at = match (s.next_at, beat.next_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        s.last_at = s.last_at.max(beat.last_at);
    }
    by_name.into_values().collect()
}

/// A worker as the broker lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// Unique among the broker's workers: `host:pid:` and a random part.
    pub id: String,
    /// The machine's host name.
    pub host: String,
    /// The worker's process id.
    pub pid: u32,
    /// When it started (ms since the epoch).
    pub started_at: Millis,
    /// When the broker received its latest report; set by the broker.
    pub heartbeat_at: Millis,
    /// When that report expires; set by the broker from the report's `ttl`.
    pub expires_at: Millis,
    /// Its queues, in the order it was built with.
    pub queues: Vec<QueueBeat>,
    /// Its schedules, in the order it was built with.
    pub schedules: Vec<ScheduleBeat>,
}

impl WorkerInfo {
    /// A worker of this process, with a fresh id, started now.
    pub fn this_process(started_at: Millis, queues: Vec<QueueBeat>) -> Self {
        let host = host_name();
        let pid = std::process::id();
        WorkerInfo {
            id: format!("{host}:{pid}:{:08x}", fastrand::u32(..)),
            host,
            pid,
            started_at,
            heartbeat_at: 0,
            expires_at: 0,
            queues,
            schedules: Vec::new(),
        }
    }

    /// Whether it works `queue`.
    pub fn takes(&self, queue: &str) -> bool {
        self.queues.iter().any(|q| q.queue == queue)
    }

    /// The jobs it holds, over all queues.
    pub fn held(&self) -> usize {
        self.queues.iter().map(|q| q.held).sum()
    }
}

/// How many of `workers` work `queue`: a queue's consumers where workers report themselves.
pub fn consumers(workers: &[WorkerInfo], queue: &str) -> u64 {
    workers.iter().filter(|w| w.takes(queue)).count() as u64
}

/// One report of a worker to its broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerBeat {
    /// Who reports (its `heartbeat_at` and `expires_at` are the broker's to set).
    pub worker: WorkerInfo,
    /// How long the report lasts.
    pub ttl: Duration,
    /// What it settled since its previous report, per queue; queues with nothing are left
    /// out.
    pub settled: Vec<(String, Throughput)>,
}

impl WorkerBeat {
    /// Refuses a report brokers cannot store, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (what, value) in [("worker id", &self.worker.id), ("host", &self.worker.host)] {
            if value.is_empty() || value.len() > MAX_NAME {
                return Err(ConfigError::new(
                    what,
                    value,
                    format!("1 to {MAX_NAME} bytes"),
                ));
            }
        }
        Ok(())
    }

    /// The report's `ttl` in milliseconds.
    pub fn ttl_millis(&self) -> Millis {
        self.ttl.as_millis().min(i64::MAX as u128) as Millis
    }
}

/// One bucket of a queue's throughput: what was settled in the [`BUCKET`] starting `at`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bucket {
    /// The bucket's start (ms since the epoch, a multiple of [`BUCKET`]).
    pub at: Millis,
    /// What was settled in it.
    pub counts: Throughput,
}

/// The start of the bucket holding `now`.
pub fn bucket_of(now: Millis) -> Millis {
    let span = BUCKET.as_millis() as Millis;
    now - now.rem_euclid(span)
}

/// The last minute's and the last hour's sums of `buckets` at `now`: the buckets that
/// started within the last 60 s (the running one and the five before it) and within the
/// last hour.
pub fn windows(buckets: &[Bucket], now: Millis) -> (Throughput, Throughput) {
    let current = bucket_of(now);
    let mut minute = Throughput::default();
    let mut hour = Throughput::default();
    for b in buckets {
        let age = current - b.at;
        if !(0..3_600_000).contains(&age) {
            continue;
        }
        hour.add(&b.counts);
        if age < 60_000 {
            minute.add(&b.counts);
        }
    }
    (minute, hour)
}

impl Throughput {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Throughput) {
        self.completed += other.completed;
        self.failed += other.failed;
        self.dead += other.dead;
    }

    /// Whether nothing was settled.
    pub fn is_empty(&self) -> bool {
        *self == Throughput::default()
    }
}

/// The machine's host name: the kernel's on Linux, else `HOSTNAME` or `COMPUTERNAME`,
/// else `localhost`. Read from a file rather than through a crate: the core forbids
/// `unsafe`, and on the platforms Hopper targets the file or the variable is there.
fn host_name() -> String {
    let read = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let name = read
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    let mut end = name.len().min(MAX_NAME - 20);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(completed: u64) -> Throughput {
        Throughput {
            completed,
            failed: 0,
            dead: 0,
        }
    }

    #[test]
    fn windows_sum_the_last_minute_and_hour() {
        let now = 1_000_000_005_000; // 5 s into a bucket
        let at = |ago_s: i64| bucket_of(now) - ago_s * 1000;
        let buckets = [
            Bucket {
                at: at(0),
                counts: t(1),
            },
            Bucket {
                at: at(50),
                counts: t(2),
            },
            Bucket {
                at: at(60),
                counts: t(4),
            },
            Bucket {
                at: at(3590),
                counts: t(8),
            },
            Bucket {
                at: at(3600),
                counts: t(16),
            },
            Bucket {
                at: at(-10),
                counts: t(32),
            },
        ];
        let (minute, hour) = windows(&buckets, now);
        assert_eq!(minute.completed, 3);
        assert_eq!(hour.completed, 15);
        assert_eq!(bucket_of(now) % 10_000, 0);
        assert_eq!(bucket_of(now), now - 5_000);
    }

    #[test]
    fn this_process_names_host_and_pid() {
        let w = WorkerInfo::this_process(1, vec![]);
        assert_eq!(w.pid, std::process::id());
        assert!(w.id.starts_with(&format!("{}:{}:", w.host, w.pid)));
        let beat = WorkerBeat {
            worker: w,
            ttl: HEARTBEAT_EVERY * MISSED_BEATS,
            settled: vec![],
        };
        beat.validate().unwrap();
        assert_eq!(beat.ttl_millis(), 30_000);
        let mut bad = beat.clone();
        bad.worker.id.clear();
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("worker id")
        );
    }

    #[test]
    fn schedules_merge_by_name_across_workers() {
        let beat = |name: &str, next: Option<Millis>, last: Option<Millis>| ScheduleBeat {
            name: name.into(),
            queue: "q".into(),
            spec: "every 60s".into(),
            next_at: next,
            last_at: last,
        };
        let worker = |schedules| WorkerInfo {
            schedules,
            ..WorkerInfo::this_process(0, Vec::new())
        };
        let workers = [
            worker(vec![
                beat("tick", Some(120), Some(60)),
                beat("a", None, None),
            ]),
            worker(vec![beat("tick", Some(180), Some(120))]),
            worker(vec![beat("tick", None, None)]),
        ];
        let merged = schedules(&workers);
        let summary: Vec<_> = merged
            .iter()
            .map(|s| {
                (
                    s.schedule.name.as_str(),
                    s.schedule.next_at,
                    s.schedule.last_at,
                    s.workers,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [("a", None, None, 1), ("tick", Some(120), Some(120), 3)],
            "by name; the earliest next slot, the latest slot, every holder counted"
        );
    }
}
