//! The wall clock brokers stamp jobs and leases with.

use crate::job::{Millis, to_millis};
use std::time::SystemTime;

/// Where a broker reads "now" from.
///
/// Production brokers read the system clock, so that several processes sharing one store
/// agree on lease expiry. Tests pick [`Clock::tokio`], which follows tokio's clock: under
/// `tokio::time::pause()` it only moves when the test advances time, so lease expiry and
/// delays are exact and instant.
#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    /// `SystemTime::now()`.
    #[default]
    System,
    /// A fixed wall-clock anchor plus tokio's elapsed time since it was taken.
    Tokio {
        /// Wall time at the anchor.
        anchor_millis: Millis,
        /// tokio's time at the anchor.
        anchor: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that follows tokio's (possibly paused) time. Call it inside a runtime.
    pub fn tokio() -> Self {
        Clock::Tokio {
            anchor_millis: to_millis(SystemTime::now()),
            anchor: tokio::time::Instant::now(),
        }
    }

    /// Milliseconds since the Unix epoch. The tokio variant must be read on a runtime thread.
    pub fn now_millis(&self) -> Millis {
        match self {
            Clock::System => to_millis(SystemTime::now()),
            Clock::Tokio {
                anchor_millis,
                anchor,
            } => anchor_millis + anchor.elapsed().as_millis() as i64,
        }
    }
}
