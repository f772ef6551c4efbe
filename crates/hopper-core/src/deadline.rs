//! Wall-clock deadlines for broker calls that wait on the network: [`answer_within`].
//!
//! A server cut off by a network partition, or a host that died without closing its
//! sockets, never answers and never says so: the call waits until the kernel gives the
//! connection up, which takes a quarter of an hour on Linux's defaults. Servers enforce
//! their own statement timeouts, but their answer cannot cross a partition either.
//!
//! The deadlines are kept by one thread for the whole process, not by tokio timers: on
//! tokio's paused clock, as tests run, a timer fires the moment the runtime waits on a
//! socket. Setting one costs a lock and a map insert; the thread sleeps until the earliest.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// The deadlines set and not yet reached, earliest first, each with its caller's alarm,
/// and the number of the last one set (two may share an instant).
type Alarms = (BTreeMap<(Instant, u64), oneshot::Sender<()>>, u64);

/// The process's deadlines and the thread that keeps them.
#[derive(Default)]
struct Watch {
    alarms: Mutex<Alarms>,
    earlier: Condvar,
}

impl Watch {
    fn get() -> &'static Watch {
        static WATCH: OnceLock<&'static Watch> = OnceLock::new();
        WATCH.get_or_init(|| {
            let watch: &'static Watch = Box::leak(Box::default());
            std::thread::Builder::new()
                .name("hopper-deadlines".into())
                .spawn(move || watch.keep())
                .expect("a thread for broker call deadlines");
            watch
        })
    }

    fn lock(&self) -> MutexGuard<'_, Alarms> {
        self.alarms.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rings each alarm at its time, sleeping until the earliest in between.
    fn keep(&self) {
        let mut alarms = self.lock();
        loop {
            let now = Instant::now();
            while let Some(entry) = alarms.0.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let _ = entry.remove().send(());
            }
            let wait = alarms
                .0
                .keys()
                .next()
                .map_or(Duration::from_secs(3600), |(at, _)| *at - now);
            alarms = self
                .earlier
                .wait_timeout(alarms, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn set(&self, at: Instant) -> (u64, oneshot::Receiver<()>) {
        let (ring, rung) = oneshot::channel();
        let mut alarms = self.lock();
        alarms.1 += 1;
        let key = (at, alarms.1);
        let earliest = alarms.0.keys().next().is_none_or(|first| key < *first);
        alarms.0.insert(key, ring);
        drop(alarms);
        if earliest {
            self.earlier.notify_one();
        }
        (key.1, rung)
    }

    fn clear(&self, at: Instant, id: u64) {
        self.lock().0.remove(&(at, id));
    }
}

/// How long a call may go unanswered on a connection whose server cancels statements at
/// `statement_timeout`: that long and as long again, at most 10 s more. Past it the server
/// would have answered, if only with its cancellation, so no answer means none can come.
pub fn answer_limit(statement_timeout: Duration) -> Duration {
    statement_timeout + statement_timeout.min(Duration::from_secs(10))
}

/// Polls `call` until it finishes (`Some`) or `limit` of wall-clock time has passed
/// (`None`). On `None` the call is left unfinished for the caller to drop: what it held
/// (a connection in the middle of a reply) is the caller's to discard.
pub async fn answer_within<F: Future>(limit: Duration, call: Pin<&mut F>) -> Option<F::Output> {
    let at = Instant::now() + limit;
    let watch = Watch::get();
    let (id, rung) = watch.set(at);
    let out = match futures_util::future::select(call, rung).await {
        futures_util::future::Either::Left((out, _)) => Some(out),
        futures_util::future::Either::Right(_) => None,
    };
    watch.clear(at, id);
    out
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::time::{Duration, Instant};

    use super::answer_within;

    /// A call that never finishes ends at its deadline, on the wall clock, while the
    /// tokio clock is paused; one that finishes first keeps its answer.
    #[tokio::test(start_paused = true)]
    async fn a_call_without_answer_ends_at_its_wall_clock_deadline() {
        let started = Instant::now();
        let never = pin!(std::future::pending::<()>());
        assert_eq!(answer_within(Duration::from_millis(200), never).await, None);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert_eq!(
            super::answer_limit(Duration::from_millis(500)),
            Duration::from_secs(1)
        );
        assert_eq!(
            super::answer_limit(Duration::from_secs(60)),
            Duration::from_secs(70)
        );
        let quick = pin!(async { 7 });
        assert_eq!(answer_within(Duration::from_secs(60), quick).await, Some(7));
        // Deadlines set in any order ring in theirs.
        let (first, second) = (
            pin!(std::future::pending::<()>()),
            pin!(std::future::pending::<()>()),
        );
        let (a, b) = tokio::join!(
            answer_within(Duration::from_millis(300), first),
            answer_within(Duration::from_millis(100), second)
        );
        assert_eq!((a, b), (None, None));
    }
}
