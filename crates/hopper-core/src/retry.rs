//! The retry policy: exponential backoff with jitter, a cap, and a ceiling on attempts.

use std::time::Duration;

use crate::error::ConfigError;
use crate::job::MAX_DELAY;

/// When a failed job runs again, and when it stops being retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failed attempt.
    pub base: Duration,
    /// The delay never grows past this.
    pub cap: Duration,
    /// Growth per attempt (2.0 doubles).
    pub factor: f64,
    /// Spread, as a fraction of the delay: 0.2 draws from 80%–120%. Spreading retries
    /// keeps a burst of failures from coming back as a burst.
    pub jitter: f64,
    /// When set, lowers every job's `max_attempts` to at most this.
    pub max_attempts: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(600),
            factor: 2.0,
            jitter: 0.2,
            max_attempts: None,
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempt + 1`, after attempt `attempt` (1-based) failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(64) as i32;
        let raw = self.base.as_secs_f64() * self.factor.powi(exp);
        let capped = raw.min(self.cap.as_secs_f64());
        let spread = if self.jitter > 0.0 {
            1.0 + self.jitter * (fastrand::f64() * 2.0 - 1.0)
        } else {
            1.0
        };
        let secs = (capped * spread).min(self.cap.as_secs_f64()).max(0.0);
        // Capped again after the conversion: the cap read as f64 may round up (found by
        // fuzzing: a cap of 3153599999.999999999 s gave 3153600000 s).
        Duration::try_from_secs_f64(secs).map_or(self.cap, |d| d.min(self.cap))
    }

    /// The attempts a job gets: its own `max_attempts`, lowered by this policy's.
    pub fn max_attempts_for(&self, job_max: u32) -> u32 {
        self.max_attempts.map_or(job_max, |m| m.min(job_max))
    }

    /// Refuses values that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.factor >= 1.0 && self.factor.is_finite()) {
            return Err(ConfigError::new(
                "retry.factor",
                self.factor,
                "a finite number from 1.0 up",
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(ConfigError::new("retry.jitter", self.jitter, "0.0 to 1.0"));
        }
        for (setting, value) in [("retry.base", self.base), ("retry.cap", self.cap)] {
            if value > MAX_DELAY {
                let allowed = format!("at most {} days", MAX_DELAY.as_secs() / 86_400);
                return Err(ConfigError::new(setting, format!("{value:?}"), allowed));
            }
        }
        if self.max_attempts == Some(0) {
            return Err(ConfigError::new("retry.max_attempts", 0, "1 or more"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_exponentially_within_the_jitter_and_stop_at_the_cap() {
        let p = RetryPolicy::default();
        for attempt in 1..=6 {
            let want = 2f64.powi(attempt as i32 - 1);
            let got = p.delay(attempt).as_secs_f64();
            assert!(
                got >= want * 0.8 - 1e-9 && got <= want * 1.2 + 1e-9,
                "{attempt}: {got}"
            );
        }
        assert!(p.delay(40) <= Duration::from_secs(600));
        let exact = RetryPolicy { jitter: 0.0, ..p };
        assert_eq!(exact.delay(3), Duration::from_secs(4));
    }

    #[test]
    fn bad_policies_are_refused_by_name() {
        let e = RetryPolicy {
            jitter: 2.0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.setting, "retry.jitter");
        let e = RetryPolicy {
            max_attempts: Some(0),
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.setting, "retry.max_attempts");
        // Found by fuzzing: a cap of Duration::MAX passed, then made `delay` panic.
        let e = RetryPolicy {
            cap: Duration::MAX,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.setting, "retry.cap");
        let huge = RetryPolicy {
            base: Duration::MAX,
            cap: Duration::MAX,
            jitter: 0.0,
            ..Default::default()
        };
        assert_eq!(huge.delay(1), Duration::MAX);
        let odd = RetryPolicy {
            base: Duration::from_secs(3_153_600_000),
            cap: Duration::new(3_153_599_999, 999_999_999),
            jitter: 0.0,
            ..Default::default()
        };
        assert_eq!(odd.delay(1), odd.cap);
    }
}
