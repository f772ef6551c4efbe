//! Rate limits: at most [`RateLimit::max`] jobs of a queue start in any window of
//! [`RateLimit::per`], across every worker, kept by the broker
//! ([`Broker::set_rate_limit`](crate::Broker::set_rate_limit)).
//!
//! A sliding window, not a token bucket: a bucket that starts full lets `max` jobs start at
//! once and then `max` more over the next `per`, twice the limit in one window. The broker
//! keeps the start times of a limited queue's latest `max` claims; a claim takes at most
//! `max` less those that started within `per` before it, and when that is none, says when
//! the oldest of them leaves the window (the next due time).

use std::collections::VecDeque;
use std::time::Duration;

use crate::error::ConfigError;
use crate::job::{MAX_DELAY, Millis};

/// The most jobs a limit may let start per window.
pub const MAX_RATE: u32 = 100_000;

/// At most `max` starts of a queue's jobs in any window of `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Starts allowed per window: 1 to [`MAX_RATE`].
    pub max: u32,
    /// The window: from 1 ms to [`MAX_DELAY`].
    pub per: Duration,
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
        Ok(RateLimit { max, per })
    }

    fn per_ms(&self) -> Millis {
        self.per.as_millis() as Millis
    }
}

/// A limited queue's window: its limit and the start times of its latest claims, oldest
/// first.
#[derive(Debug, Clone)]
pub struct Window {
    limit: RateLimit,
    starts: VecDeque<Millis>,
}

impl Window {
    /// An empty window under `limit`.
    pub fn new(limit: RateLimit) -> Self {
        Window {
            limit,
            starts: VecDeque::new(),
        }
    }

    /// The limit this window keeps.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// How many jobs may start at `now`: `max` less the starts within `per` before it.
    pub fn room(&mut self, now: Millis) -> usize {
        let since = now - self.limit.per_ms();
        while self.starts.front().is_some_and(|&t| t <= since) {
            self.starts.pop_front();
        }
        self.limit.max as usize - self.starts.len().min(self.limit.max as usize)
    }

    /// Records `n` starts at `now` (at most the room [`room`](Self::room) gave).
    pub fn started(&mut self, n: usize, now: Millis) {
        self.starts.extend(std::iter::repeat_n(now, n));
    }

    /// When the next job may start, while there is no room: the oldest start's time plus
    /// `per`.
    pub fn next_room(&self) -> Option<Millis> {
        let full = self.starts.len() >= self.limit.max as usize;
        full.then(|| self.starts.front().map(|&t| t + self.limit.per_ms()))
            .flatten()
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
