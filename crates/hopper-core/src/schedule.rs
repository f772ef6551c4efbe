//! Periodic jobs: a [`Schedule`] names a job and when to enqueue it, by a cron expression
//! in a time zone or a plain interval. Every worker built with a schedule
//! ([`WorkerBuilder::schedule`](crate::WorkerBuilder::schedule)) enqueues each of its
//! slots, and the broker stores one job per slot: the slot's time is the job's unique key
//! (docs/design.md, "Periodic jobs").

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::error::ConfigError;
use crate::job::{MAX_DELAY, Millis, NewJob, UniqueScope, validate_queue_name};

/// The header a periodic job carries with its schedule's name.
pub const SCHEDULE_HEADER: &str = "hopper-schedule";
/// The header a periodic job carries with its slot: milliseconds since the Unix epoch.
pub const SLOT_HEADER: &str = "hopper-slot";
/// How long past the next slot a slot's key is still held: a worker that starts late in
/// a slot's period, or whose enqueue of it was retried, finds it taken.
const HOLD_MARGIN: Millis = 60_000;

/// What a worker that starts does about the latest slot before it, when no worker
/// enqueued that slot (every worker was down at the time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missed {
    /// Nothing: the next job is the next slot's (as cron does). The default.
    #[default]
    Skip,
    /// Enqueues the latest slot once, at start. Only the latest: a schedule down for a
    /// week runs once, not once per slot missed.
    RunOnce,
}

/// When a schedule's slots fall.
#[derive(Debug, Clone)]
enum When {
    /// A cron expression (five fields, or six with seconds first) in a time zone.
    Cron { cron: Box<Cron>, zone: Tz },
    /// Every `ms` milliseconds, counted from the Unix epoch, so every worker agrees.
    Every { ms: Millis },
}

/// A periodic job: its name, when its slots fall, the job each slot enqueues, and what
/// to do about a missed slot.
#[derive(Debug, Clone)]
pub struct Schedule {
    name: String,
    spec: String,
    when: When,
    job: NewJob,
    missed: Missed,
}

impl Schedule {
    /// Enqueues `job` at each time `expression` matches, in UTC until
    /// [`time_zone`](Self::time_zone) says otherwise. Five fields (minute, hour, day of
    /// month, month, day of week), six with seconds first, or `@daily`, `@hourly` and the
    /// like.
    ///
    /// # Errors
    /// An invalid expression, an invalid name, or a job with a unique key of its own (a
    /// periodic job's key is its slot), named.
    pub fn cron(name: &str, expression: &str, job: NewJob) -> Result<Self, ConfigError> {
        let cron = Cron::from_str(expression).map_err(|e| {
            ConfigError::new(
                format!("cron expression of schedule {name}"),
                expression,
                format!("five fields, or six with seconds first ({e})"),
            )
        })?;
        let when = When::Cron {
            cron: Box::new(cron),
            zone: Tz::UTC,
        };
        Self::new(name, expression.to_owned(), when, job)
    }

    /// Enqueues `job` every `period`, at the multiples of `period` since the Unix epoch
    /// (every hour: on the hour, UTC), at least 1 s and at most
    /// [`MAX_DELAY`].
    ///
    /// # Errors
    /// A period under 1 s or over [`MAX_DELAY`], or the errors of [`cron`](Self::cron).
    pub fn every(name: &str, period: Duration, job: NewJob) -> Result<Self, ConfigError> {
        if period < Duration::from_secs(1) || period > MAX_DELAY {
            return Err(ConfigError::new(
                format!("period of schedule {name}"),
                format!("{period:?}"),
                format!("1 s to {} days", MAX_DELAY.as_secs() / 86_400),
            ));
        }
        let when = When::Every {
            ms: period.as_millis() as Millis,
        };
        Self::new(name, format!("every {period:?}"), when, job)
    }

    fn new(name: &str, spec: String, when: When, job: NewJob) -> Result<Self, ConfigError> {
        validate_queue_name(name).map_err(|e| ConfigError {
            setting: "schedule name".into(),
            ..e
        })?;
        if job.unique.is_some() {
            return Err(ConfigError::new(
                format!("job of schedule {name}"),
                "a unique key",
                "no unique key: a periodic job's key is its slot",
            ));
        }
        let schedule = Schedule {
            name: name.to_owned(),
            spec,
            when,
            job,
            missed: Missed::default(),
        };
        schedule.slot_job(0).validate().map_err(|e| match e {
            crate::Error::Config(c) => c,
            other => ConfigError::new(format!("job of schedule {name}"), other, "a valid job"),
        })?;
        Ok(schedule)
    }

    /// Reads the cron expression in the time zone `zone`, an IANA name such as
    /// `Europe/Paris`. Has no effect on an interval.
    ///
    /// # Errors
    /// A name that is not a time zone.
    pub fn time_zone(mut self, zone: &str) -> Result<Self, ConfigError> {
        let tz = Tz::from_str(zone).map_err(|_| {
            ConfigError::new(
                format!("time zone of schedule {}", self.name),
                zone,
                "an IANA time zone name such as Europe/Paris or UTC",
            )
        })?;
        if let When::Cron { zone, .. } = &mut self.when {
            *zone = tz;
            self.spec = format!("{} ({tz})", self.spec);
        }
        Ok(self)
    }

    /// What a worker starting after a slot no worker enqueued does about it.
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The expression or interval, as given, with its time zone.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The queue its jobs go to.
    pub fn queue(&self) -> &str {
        &self.job.queue
    }

    /// The missed-slot policy.
    pub fn missed_policy(&self) -> Missed {
        self.missed
    }

    /// The first slot strictly after `t` (ms since the epoch), if there is one.
    pub fn next_after(&self, t: Millis) -> Option<Millis> {
        match &self.when {
            When::Every { ms } => Some((t.div_euclid(*ms) + 1) * ms),
            When::Cron { cron, zone } => {
                let at = zone.from_utc_datetime(&whole_second(t)?.naive_utc());
                let next = cron.find_next_occurrence(&at, false).ok()?;
                Some(next.with_timezone(&Utc).timestamp_millis())
            }
        }
    }

    /// The latest slot at or before `t`, if there is one.
    pub fn latest_at(&self, t: Millis) -> Option<Millis> {
        match &self.when {
            When::Every { ms } => Some(t.div_euclid(*ms) * ms),
            When::Cron { cron, zone } => {
                let at = zone.from_utc_datetime(&whole_second(t)?.naive_utc());
                let prev = cron.find_previous_occurrence(&at, true).ok()?;
                Some(prev.with_timezone(&Utc).timestamp_millis())
            }
        }
    }

    /// The job of `slot`: the schedule's job, due at the slot, unique by the schedule and
    /// the slot until a minute after the following slot, with both in its headers.
    pub fn slot_job(&self, slot: Millis) -> NewJob {
        let next = self.next_after(slot).unwrap_or(slot);
        let hold = (next - slot).max(0) + HOLD_MARGIN;
        let hold = Duration::from_millis(hold as u64).min(MAX_DELAY);
        let mut job = self.job.clone();
        if slot > 0 {
            job = job.run_at(crate::job::from_millis(slot));
        }
        job.header(SCHEDULE_HEADER, &self.name)
            .header(SLOT_HEADER, slot.to_string())
            .unique(format!("{}@{slot}", self.name), UniqueScope::For(hold))
    }
}

/// `t` as a UTC time, if chrono can hold it.
fn utc(t: Millis) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(t)
}

/// `t` cut to its whole second, as a UTC time: cron slots fall on whole seconds, and the
/// cron crate keeps a time's fraction when the time itself matches.
fn whole_second(t: Millis) -> Option<DateTime<Utc>> {
    utc(t.div_euclid(1000) * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> NewJob {
        NewJob::new("reports", b"{}".to_vec())
    }

    /// 2026-12-05T10:00:00Z.
    const T: Millis = 1_796_464_800_000;

    #[test]
    fn cron_slots_follow_the_expression_and_zone() {
        let hourly = Schedule::cron("h", "0 * * * *", job()).unwrap();
        assert_eq!(hourly.next_after(T), Some(T + 3_600_000));
        assert_eq!(
            hourly.latest_at(T),
            Some(T),
            "a slot at t is the latest at t"
        );
        assert_eq!(hourly.latest_at(T + 1), Some(T));
        assert_eq!(hourly.next_after(T + 1), Some(T + 3_600_000));
        assert_eq!(hourly.latest_at(T - 1), Some(T - 3_600_000));
        let seconds = Schedule::cron("s", "*/15 * * * * *", job()).unwrap();
        assert_eq!(seconds.next_after(T), Some(T + 15_000));
        // 03:00 in Paris is 02:00 UTC in winter.
        let paris = Schedule::cron("p", "0 3 * * *", job())
            .unwrap()
            .time_zone("Europe/Paris")
            .unwrap();
        let next = paris.next_after(T).unwrap();
        assert_eq!(utc(next).unwrap().to_rfc3339(), "2026-12-06T02:00:00+00:00");
        assert_eq!(paris.spec(), "0 3 * * * (Europe/Paris)");
    }

    #[test]
    fn intervals_count_from_the_epoch() {
        let every = Schedule::every("e", Duration::from_secs(60), job()).unwrap();
        assert_eq!(every.next_after(T + 1), Some(T + 60_000));
        assert_eq!(every.latest_at(T + 59_999), Some(T));
        let slot = every.slot_job(T);
        let unique = slot.unique.unwrap();
        assert_eq!(unique.key, format!("e@{T}"));
        assert_eq!(unique.scope, UniqueScope::For(Duration::from_secs(120)));
        assert_eq!(slot.headers[SLOT_HEADER], T.to_string());
        assert_eq!(slot.headers[SCHEDULE_HEADER], "e");
    }

    #[test]
    fn bad_schedules_are_refused_by_name() {
        let setting = |r: Result<Schedule, ConfigError>| r.unwrap_err().setting;
        assert_eq!(
            setting(Schedule::cron("x", "61 * * * *", job())),
            "cron expression of schedule x"
        );
        assert_eq!(
            setting(
                Schedule::cron("x", "0 * * * *", job()).and_then(|s| s.time_zone("Mars/Olympus"))
            ),
            "time zone of schedule x"
        );
        assert_eq!(
            setting(Schedule::every("x", Duration::ZERO, job())),
            "period of schedule x"
        );
        assert_eq!(
            setting(Schedule::every("bad name", Duration::from_secs(1), job())),
            "schedule name"
        );
        assert_eq!(
            setting(Schedule::every(
                "x",
                Duration::from_secs(1),
                job().unique_key("k")
            )),
            "job of schedule x"
        );
        let bad_queue = NewJob::new("bad queue", Vec::new());
        assert_eq!(
            setting(Schedule::every("x", Duration::from_secs(1), bad_queue)),
            "queue"
        );
    }
}
