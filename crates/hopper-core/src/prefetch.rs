//! Fetch sizing: the [`Prefetch`] policies and the adaptive [`AutoSizer`] (docs/design.md,
//! "Prefetch policies").

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::ConfigError;

/// The work one `Auto` fetch aims to hold.
pub const AUTO_TARGET: Duration = Duration::from_millis(250);
/// The largest size the `Auto` rule gives (per slot).
pub const AUTO_CEILING: usize = 16;
/// Weight of the newest job in the moving average of job times.
pub const AUTO_NEWEST_WEIGHT: f64 = 0.3;

/// How many jobs a worker holds for a queue (its window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefetch {
    /// The window equals the queue's concurrency: a fetch claims at most the free slots.
    #[default]
    Slots,
    /// Hold up to `n` jobs (at least the concurrency); the rest of a batch waits, leased.
    Fixed(usize),
    /// Adapt the window to about 250 ms of work per slot (see [`AutoSizer`]).
    Auto,
}

impl fmt::Display for Prefetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prefetch::Slots => f.write_str("slots"),
            Prefetch::Fixed(n) => write!(f, "{n}"),
            Prefetch::Auto => f.write_str("auto"),
        }
    }
}

impl FromStr for Prefetch {
    type Err = ConfigError;

    /// Parses `slots`, `auto` or a positive number.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s.trim() {
            "slots" => Ok(Prefetch::Slots),
            "auto" => Ok(Prefetch::Auto),
            other => match other.parse::<usize>() {
                Ok(0) => Err(ConfigError::new(
                    "prefetch",
                    0,
                    "`slots`, `auto`, or a number from 1 up",
                )),
                Ok(n) => Ok(Prefetch::Fixed(n)),
                Err(_) => Err(ConfigError::new(
                    "prefetch",
                    other,
                    "`slots`, `auto`, or a number from 1 up",
                )),
            },
        }
    }
}

/// The adaptive fetch size of `Prefetch::Auto`, for one queue of one worker.
///
/// - Job times are a moving average in which the newest weighs [`AUTO_NEWEST_WEIGHT`].
/// - `wanted = clamp(floor(250 ms / average), 1, 16)`; before any job was timed, 16.
/// - The grown size doubles only after two fetches in a row came back full.
/// - A short fetch sets the grown size to what came back, an empty one to 1.
/// - The next size is `min(wanted, grown)`: growth is slow, shrinking immediate.
#[derive(Debug, Clone)]
pub struct AutoSizer {
    avg: Option<f64>,
    grown: usize,
    full_in_a_row: u32,
}

impl Default for AutoSizer {
    fn default() -> Self {
        AutoSizer {
            avg: None,
            grown: 1,
            full_in_a_row: 0,
        }
    }
}

impl AutoSizer {
    /// Records the time one job took, hand-off to its slot asking for more.
    pub fn record(&mut self, took: Duration) {
        let s = took.as_secs_f64();
        self.avg = Some(match self.avg {
            None => s,
            Some(avg) => avg * (1.0 - AUTO_NEWEST_WEIGHT) + s * AUTO_NEWEST_WEIGHT,
        });
    }

    /// The size the job times alone ask for.
    pub fn wanted(&self) -> usize {
        match self.avg {
            None => AUTO_CEILING,
            Some(avg) if avg <= 0.0 => AUTO_CEILING,
            Some(avg) => {
                // A hair of slack so that 250 ms / 10 ms is 25, not 24.999….
                let n = (AUTO_TARGET.as_secs_f64() / avg + 1e-9).floor();
                (n as usize).clamp(1, AUTO_CEILING)
            }
        }
    }

    /// The size of the next fetch.
    pub fn size(&self) -> usize {
        self.wanted().min(self.grown)
    }

    /// The moving average of job times, once a job was timed.
    pub fn average(&self) -> Option<Duration> {
        self.avg.map(Duration::from_secs_f64)
    }

    /// Records what a fetch that asked for `asked` jobs got back.
    pub fn fetched(&mut self, asked: usize, got: usize) {
        if got == 0 {
            self.grown = 1;
            self.full_in_a_row = 0;
        } else if got < asked {
            self.grown = got.min(AUTO_CEILING);
            self.full_in_a_row = 0;
        } else {
            self.full_in_a_row += 1;
            if self.full_in_a_row >= 2 {
                self.grown = (asked.max(self.grown) * 2).min(AUTO_CEILING);
                self.full_in_a_row = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: Duration, backlog: usize) -> Vec<usize> {
        let mut s = AutoSizer::default();
        let mut left = backlog;
        let mut sizes = Vec::new();
        while left > 0 {
            let asked = s.size();
            let got = asked.min(left);
            left -= got;
            s.fetched(asked, got);
            for _ in 0..got {
                s.record(job);
            }
            sizes.push(got);
        }
        sizes
    }

    #[test]
    fn ten_ms_jobs_double_every_two_full_fetches_to_sixteen() {
        let sizes = run(Duration::from_millis(10), 200);
        assert_eq!(
            sizes,
            [
                1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 10
            ]
        );
    }

    #[test]
    fn eighteen_ms_jobs_settle_at_thirteen() {
        let sizes = run(Duration::from_millis(18), 200);
        assert_eq!(&sizes[..9], &[1, 1, 2, 2, 4, 4, 8, 8, 13]);
        assert!(sizes[8..sizes.len() - 1].iter().all(|&n| n == 13));
    }

    #[test]
    fn long_jobs_stay_at_one() {
        assert_eq!(run(Duration::from_millis(300), 10), [1; 10]);
    }

    #[test]
    fn short_and_empty_fetches_reset_the_size() {
        let mut s = AutoSizer::default();
        for _ in 0..8 {
            let n = s.size();
            s.fetched(n, n);
        }
        assert_eq!(s.size(), 16);
        s.fetched(16, 5);
        assert_eq!(s.size(), 5);
        s.fetched(5, 0);
        assert_eq!(s.size(), 1);
    }

    #[test]
    fn prefetch_words_parse_and_bad_ones_are_named() {
        assert_eq!("auto".parse::<Prefetch>().unwrap(), Prefetch::Auto);
        assert_eq!("slots".parse::<Prefetch>().unwrap(), Prefetch::Slots);
        assert_eq!("7".parse::<Prefetch>().unwrap(), Prefetch::Fixed(7));
        let e = "eager".parse::<Prefetch>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid prefetch `eager`: allowed: `slots`, `auto`, or a number from 1 up"
        );
        let e = "0".parse::<Prefetch>().unwrap_err();
        assert_eq!(e.setting, "prefetch");
        assert_eq!(e.value, "0");
    }
}
