//! Rate limits: at most [`RateLimit::max`] jobs of a queue start in any window of
//! [`RateLimit::per`], across every worker, kept by the broker
//! ([`Broker::set_rate_limit`](crate::Broker::set_rate_limit)).
//!
//! A sliding window, not a token bucket: a bucket that starts full lets `max` jobs start at
//! once and then `max` more over the next `per`, twice the limit in one window. The broker
//! keeps the start times of a limited queue's latest `max` claims; a claim takes at most
//! `max` less those that started within `per` before it, and when that is none, says when
//! the oldest of them leaves the window (the next due time).
//!
//! A limit [per key](RateLimit::per_key) keeps a window for each
//! [rate key](crate::NewJob::rate_key) of the queue's jobs instead: each key's jobs start
//! at most `max` times per `per`, whatever the other keys do (one tenant's backlog cannot
//! use up another's share). Jobs without a key share one window of their own. A claim
//! that meets a job whose key's window is full moves it to the time that window will have
//! room for it ([`Window::defer`]), so later claims do not read it again before then.

use std::collections::VecDeque;
use std::time::Duration;

use crate::error::ConfigError;
use crate::job::{MAX_DELAY, Millis};

/// The most jobs a limit may let start per window.
pub const MAX_RATE: u32 = 100_000;

/// At most `max` starts of a queue's jobs in any window of `per`, or of each rate key's
/// jobs when [`per_key`](RateLimit::per_key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Starts allowed per window: 1 to [`MAX_RATE`].
    pub max: u32,
    /// The window: from 1 ms to [`MAX_DELAY`].
    pub per: Duration,
    /// A window per [rate key](crate::NewJob::rate_key) rather than one for the queue.
    pub per_key: bool,
}

impl RateLimit {
    /// A limit of `max` starts per `per`, refused by name when out of range.
    pub fn new(max: u32, per: Duration) -> Result<Self, ConfigError> {
        if !(1..=MAX_RATE).contains(&max) {
            return Err(ConfigError::new(
                "rate limit",
                max,
                format!("1..={MAX_RATE} jobs"),
            ));
        }
        if per < Duration::from_millis(1) || per > MAX_DELAY {
            let allowed = format!("from 1 ms to {} days", MAX_DELAY.as_secs() / 86_400);
            return Err(ConfigError::new(
                "rate limit period",
                format!("{per:?}"),
                allowed,
            ));
        }
        Ok(RateLimit {
            max,
            per,
            per_key: false,
        })
    }

    /// The same limit for each [rate key](crate::NewJob::rate_key) of the queue's jobs,
    /// rather than for the queue as a whole: `50/1s per key` lets every key's jobs start 50
    /// times a second. Jobs without a key share one window. Brokers without
    /// [`Capabilities::rate_limits_per_key`](crate::Capabilities::rate_limits_per_key)
    /// refuse it.
    pub fn per_key(mut self) -> Self {
        self.per_key = true;
        self
    }

    /// The window in milliseconds.
    pub fn per_ms(&self) -> Millis {
        self.per.as_millis() as Millis
    }
}

/// `50/1s`: starts per window, the window in its largest whole unit (ms, s, m, h or d),
/// then ` per key` for a limit per key.
impl std::fmt::Display for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.per.as_millis();
        let (n, unit) = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1_000, "s"),
        ]
        .into_iter()
        .find(|(size, _)| ms % size == 0)
        .map_or((ms, "ms"), |(size, unit)| (ms / size, unit));
        write!(f, "{}/{n}{unit}", self.max)?;
        if self.per_key {
            f.write_str(" per key")?;
        }
        Ok(())
    }
}

/// A limited queue's window: its limit and the start times of its latest claims, oldest
/// first, as (time, jobs) pairs: a claim of many jobs is one pair.
#[derive(Debug, Clone)]
pub struct Window {
    limit: RateLimit,
    starts: VecDeque<(Millis, u32)>,
    /// Jobs over every pair.
    total: usize,
    /// The latest time [`defer`](Self::defer) gave, and how many jobs it gave it to.
    booked: Option<(Millis, u32)>,
}

/// Bytes of one (time, jobs) pair in [`Window::to_bytes`].
const PAIR: usize = 12;

impl Window {
    /// An empty window under `limit`.
    pub fn new(limit: RateLimit) -> Self {
        Window {
            limit,
            starts: VecDeque::new(),
            total: 0,
            booked: None,
        }
    }

    /// The limit this window keeps.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Keeps the window under a new limit: the starts already in it still count, so a
    /// change never allows a burst.
    pub fn set_limit(&mut self, limit: RateLimit) {
        self.limit = limit;
    }

    /// How many jobs may start at `now`: `max` less the starts within `per` before it.
    pub fn room(&mut self, now: Millis) -> usize {
        let since = now.saturating_sub(self.limit.per_ms());
        while let Some(&(t, n)) = self.starts.front() {
            if t > since {
                break;
            }
            self.starts.pop_front();
            self.total -= n as usize;
        }
        self.limit.max as usize - self.total.min(self.limit.max as usize)
    }

    /// Records `n` starts at `now` (at most the room [`room`](Self::room) gave). A claim
    /// that read its clock before another took the lock may come second with an earlier
    /// time: its starts are recorded at the latest start's time instead, so the window
    /// stays in order and counts them no shorter than it should.
    pub fn started(&mut self, n: usize, now: Millis) {
        if n == 0 {
            return;
        }
        let n = n.min(MAX_RATE as usize) as u32;
        self.total += n as usize;
        match self.starts.back_mut() {
            Some((t, m)) if *t >= now => *m += n,
            _ => self.starts.push_back((now, n)),
        }
    }

    /// When the next job may start, while there is no room: when enough of the oldest
    /// starts have left the window to make room for one.
    pub fn next_room(&self) -> Option<Millis> {
        let max = self.limit.max as usize;
        if self.total < max {
            return None;
        }
        // Room for one needs the total below `max`: the starts up to the pair that brings
        // it there must leave.
        let mut left = self.total;
        for &(t, n) in &self.starts {
            left -= n as usize;
            if left < max {
                return Some(t + self.limit.per_ms());
            }
        }
        None
    }

    /// The time a job held back by this full window may next be tried: the window's next
    /// room for the first `max` jobs deferred there, the period after that for the next
    /// `max`, and so on, so that a key's backlog is spread over the times it may start
    /// rather than read again by every claim. A job that still finds no room then (the
    /// limit was lowered, or the window's starts were spread over several claims) is
    /// deferred again. Brokers start each claim's deferrals afresh
    /// ([`set_booked`](Self::set_booked)`(None)`): a job deferred again goes to the next
    /// room, not behind the jobs an earlier claim spread ahead of it. The time is always
    /// after `now`, so that the job lands among the delayed jobs, not back in reach of
    /// the claim that deferred it.
    pub fn defer(&mut self, now: Millis) -> Millis {
        let earliest = self.next_room().unwrap_or(now).max(now.saturating_add(1));
        let per = self.limit.per_ms();
        let (slot, n) = match self.booked {
            Some((t, n)) if t >= earliest && n < self.limit.max => (t, n + 1),
            Some((t, _)) if t >= earliest => (t.saturating_add(per), 1),
            _ => (earliest, 1),
        };
        let slot = slot.min(crate::job::MAX_RUN_AT);
        self.booked = Some((slot, n));
        slot
    }

    /// The time of the latest start recorded, if any.
    pub fn latest_start(&self) -> Option<Millis> {
        self.starts.back().map(|&(t, _)| t)
    }

    /// What [`defer`](Self::defer) last gave, for brokers that store windows: the time and
    /// how many jobs it gave it to.
    pub fn booked(&self) -> Option<(Millis, u32)> {
        self.booked
    }

    /// Restores what [`booked`](Self::booked) gave, read back from storage.
    pub fn set_booked(&mut self, booked: Option<(Millis, u32)>) {
        self.booked = booked;
    }

    /// Whether the window holds nothing a claim at `now` would count or continue from: no
    /// start within `per` and no deferral still ahead. Such a key's window can be dropped.
    pub fn idle(&mut self, now: Millis) -> bool {
        self.room(now) == self.limit.max as usize && self.booked.is_none_or(|(t, _)| t < now)
    }

    /// The window as stored by brokers that keep it in a column: each pair as its time (8
    /// bytes) then its jobs (4 bytes), little-endian, oldest first.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.starts.len() * PAIR);
        for &(t, n) in &self.starts {
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out
    }

    /// A window under `limit` from what [`to_bytes`](Self::to_bytes) stored. Bytes that
    /// are not a whole number of pairs, or pairs out of order, were not written by a
    /// broker: they are refused rather than read as starts that never happened.
    pub fn from_bytes(limit: RateLimit, bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() % PAIR != 0 {
            return Err(format!(
                "a rate window of {} bytes, not a whole number of {PAIR}-byte starts",
                bytes.len()
            ));
        }
        let mut w = Window::new(limit);
        for pair in bytes.chunks_exact(PAIR) {
            let t = Millis::from_le_bytes(pair[..8].try_into().expect("8 bytes"));
            let n = u32::from_le_bytes(pair[8..].try_into().expect("4 bytes"));
            if w.starts.back().is_some_and(|&(last, _)| last > t) {
                return Err(format!("a rate window whose starts go back in time at {t}"));
            }
            w.started(n as usize, t);
        }
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_window_of_per_holds_more_than_max() {
        let limit = RateLimit::new(3, Duration::from_millis(100)).unwrap();
        let mut w = Window::new(limit);
        assert_eq!(w.room(0), 3);
        w.started(2, 0);
        assert_eq!(w.room(50), 1);
        w.started(1, 50);
        assert_eq!((w.room(99), w.next_room()), (0, Some(100)));
        assert_eq!(w.room(100), 2, "the two at 0 left the window");
        w.started(2, 100);
        assert_eq!((w.room(149), w.next_room()), (0, Some(150)));
        assert_eq!(w.room(150), 1);
    }

    #[test]
    fn next_room_waits_for_enough_starts_to_leave() {
        let limit = RateLimit::new(5, Duration::from_millis(100)).unwrap();
        let mut w = Window::new(limit);
        w.started(1, 10);
        w.started(2, 20);
        w.started(2, 30);
        assert_eq!((w.room(40), w.next_room()), (0, Some(110)));
        // Lowered to 3: the 1 at 10 and the 2 at 20 must leave before one more may start.
        w.set_limit(RateLimit::new(3, Duration::from_millis(100)).unwrap());
        assert_eq!((w.room(40), w.next_room()), (0, Some(120)));
        assert_eq!(w.room(119), 0);
        assert_eq!(w.room(120), 1);
    }

    #[test]
    fn the_stored_form_keeps_every_start_and_refuses_garbage() {
        let limit = RateLimit::new(10, Duration::from_millis(100)).unwrap();
        let mut w = Window::new(limit);
        w.started(3, -5);
        w.started(2, -5);
        w.started(4, 70);
        let bytes = w.to_bytes();
        assert_eq!(bytes.len(), 24, "a claim at the same time joins its pair");
        let mut back = Window::from_bytes(limit, &bytes).unwrap();
        assert_eq!(back.room(80), 1);
        assert_eq!(back.room(95), 6, "the 5 at -5 left at 95");
        assert!(Window::from_bytes(limit, &bytes[..13]).is_err());
        let mut late_first = bytes[12..].to_vec();
        late_first.extend_from_slice(&bytes[..12]);
        assert!(Window::from_bytes(limit, &late_first).is_err());
    }

    #[test]
    fn a_start_older_than_the_latest_joins_it() {
        let limit = RateLimit::new(10, Duration::from_millis(100)).unwrap();
        let mut w = Window::new(limit);
        w.started(2, 50);
        w.started(3, 40);
        assert_eq!(w.to_bytes().len(), 12, "one pair, at 50");
        assert_eq!(w.room(149), 5);
        assert_eq!(w.room(150), 10, "all five left at 150, none at 140");
    }

    #[test]
    fn deferrals_spread_a_backlog_over_the_times_it_may_start() {
        let limit = RateLimit::new(2, Duration::from_millis(100)).unwrap();
        let mut w = Window::new(limit);
        w.started(2, 10);
        let slots: Vec<Millis> = (0..5).map(|_| w.defer(50)).collect();
        assert_eq!(
            slots,
            [110, 110, 210, 210, 310],
            "two per period from the next room"
        );
        assert_eq!(w.booked(), Some((310, 1)));
        // Later, past every slot given: the next deferral starts from the window again.
        w.started(2, 400);
        assert_eq!(w.defer(450), 500);
        let mut back = Window::new(limit);
        back.set_booked(w.booked());
        assert_eq!(back.booked(), Some((500, 1)));
        assert!(!w.idle(450), "starts within the period");
        assert!(
            w.idle(501),
            "nothing within the period, nothing booked ahead"
        );
    }

    #[test]
    fn a_limit_reads_as_starts_per_window() {
        let shown = |max, ms| {
            RateLimit::new(max, Duration::from_millis(ms))
                .unwrap()
                .to_string()
        };
        assert_eq!(shown(50, 1_000), "50/1s");
        assert_eq!(shown(3, 1_500), "3/1500ms");
        assert_eq!(shown(10, 120_000), "10/2m");
        assert_eq!(shown(1, 86_400_000), "1/1d");
        let keyed = RateLimit::new(5, Duration::from_secs(1)).unwrap().per_key();
        assert_eq!(keyed.to_string(), "5/1s per key");
    }

    #[test]
    fn bad_limits_are_refused_by_name() {
        let second = Duration::from_secs(1);
        assert_eq!(RateLimit::new(0, second).unwrap_err().setting, "rate limit");
        let over = RateLimit::new(MAX_RATE + 1, second).unwrap_err();
        assert_eq!(over.setting, "rate limit");
        let zero = RateLimit::new(5, Duration::ZERO).unwrap_err();
        assert_eq!(zero.setting, "rate limit period");
        let long = RateLimit::new(5, MAX_DELAY + second).unwrap_err();
        assert_eq!(long.setting, "rate limit period");
    }
}
