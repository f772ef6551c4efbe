//! The wall clock brokers stamp jobs and leases with.

use crate::job::{Millis, to_millis};
use std::time::{Duration, SystemTime};

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

/// Work done at most once a period by whichever caller comes first after it, however many
/// share it: brokers pace their reaper of expired leases with one, so a busy worker does
/// not run it on every fetch.
#[derive(Debug)]
pub struct Pace {
    every: Millis,
    last: std::sync::atomic::AtomicI64,
}

impl Pace {
    /// Due at once, then once every `every` milliseconds.
    pub const fn new(every: Millis) -> Self {
        Pace {
            every,
            last: std::sync::atomic::AtomicI64::new(Millis::MIN),
        }
    }

    /// Whether the caller at `now` takes this turn; a turn goes to one caller only. A clock
    /// stepped back behind the last turn gives a turn at once, rather than none until it
    /// catches up again.
    pub fn due(&self, now: Millis) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let last = self.last.load(Relaxed);
        (now < last || now.saturating_sub(last) >= self.every)
            && self
                .last
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
    }
}

/// How long a broker waits for a server to answer a new connection, TCP and handshake
/// together, before it gives up naming the host and port.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `f`, giving up (`None`) after `limit` of wall-clock time. The time is kept by a
/// thread of its own rather than a tokio timer: on tokio's paused clock, as tests run, a
/// timer would fire the moment the runtime waits on the network. The thread ends as soon
/// as `f` does.
async fn within_wall_clock<F: std::future::Future>(limit: Duration, f: F) -> Option<F::Output> {
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let (fire, fired) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(limit) {
            let _ = fire.send(());
        }
    });
    let out = tokio::select! {
        out = f => Some(out),
        _ = fired => None,
    };
    drop(done);
    out
}

/// Runs a connect, `f`, for at most `limit` of wall-clock time (see [`within_wall_clock`];
/// [`CONNECT_TIMEOUT`] unless the URL sets `connect_timeout`): its own result, or the error
/// that names `shown_url` (password hidden) as not answering. Every broker's connections
/// go through here.
pub async fn connect_within<T, E>(
    shown_url: &str,
    limit: Duration,
    f: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> crate::Result<std::result::Result<T, E>> {
    within_wall_clock(limit, f).await.ok_or_else(|| {
        crate::Error::broker_msg(format!(
            "cannot connect to {shown_url}: no answer within {} s",
            limit.as_secs()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::Pace;

    #[test]
    fn a_pace_gives_one_turn_per_period() {
        let pace = Pace::new(1000);
        let turns: Vec<bool> = [0, 0, 999, 1000, 1500, 1999, 2000, 500, 900, 1500]
            .into_iter()
            .map(|now| pace.due(now))
            .collect();
        // At 500 the clock has been stepped back: a turn there at once, and the next a
        // period later.
        assert_eq!(
            turns,
            [
                true, false, false, true, false, false, true, true, false, true
            ]
        );
    }
}
