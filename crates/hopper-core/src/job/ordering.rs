//! Ordered keys: jobs of a queue that share an [ordering key](super::NewJob::ordering_key)
//! run one at a time, in the order they were enqueued, across every worker.
//!
//! Of the unfinished jobs (pending or leased) of a key, only one can be claimed: the key's
//! head. The others wait *blocked*: pending, with their `run_at` moved [`BLOCKED`]
//! milliseconds into the future, past [`MAX_RUN_AT`], so that no claim ever reaches them
//! and claims of plain jobs run exactly as before. Their own time is the stored one less
//! that offset ([`own_run_at`]).
//!
//! When the head ends (completed, dead-lettered or cancelled), the broker unblocks the
//! key's next job: the first blocked one by id, passing over jobs that stepped aside and
//! whose own time has not come; when every one is such, the one due first. A head that is
//! retried, released or snoozed stays the head, so the jobs after it keep waiting; one
//! retried with [`Outcome::Retry`](crate::Outcome::Retry)'s `step_aside` is blocked at its
//! retry time when other jobs of its key wait, and the next is chosen as when a head ends.
//! A stepped-aside job is the only blocked job with an attempt charged: enqueues and
//! re-drives block jobs with none.
//!
//! Brokers decide, in the same transaction and under the key's lock, whether a new job is
//! blocked (some unfinished job of its key exists) and whether the next one is unblocked
//! (no unblocked unfinished job of its key is left): [`BLOCKED`] is the one rule they share.

use super::{MAX_RUN_AT, Millis};

/// How far a blocked job's `run_at` is moved: 2^62 ms, past every time a job can be given
/// ([`MAX_RUN_AT`], the end of the year 9999, is under 2^48 ms). A stored `run_at` past
/// [`MAX_RUN_AT`] is a blocked job's, whatever its own time (one before 1970 included).
pub const BLOCKED: Millis = 1 << 62;

/// Whether a stored `run_at` is that of a job blocked behind its key's head: past
/// [`MAX_RUN_AT`].
pub fn is_blocked(run_at: Millis) -> bool {
    run_at > MAX_RUN_AT
}

/// The `run_at` a job of time `run_at` is stored with while blocked.
pub fn blocked(run_at: Millis) -> Millis {
    if is_blocked(run_at) {
        run_at
    } else {
        run_at + BLOCKED
    }
}

/// A stored `run_at` as the job's own time, blocked or not.
pub fn own_run_at(run_at: Millis) -> Millis {
    if is_blocked(run_at) {
        run_at - BLOCKED
    } else {
        run_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::job::{MIN_RUN_AT, NewJob};

    #[test]
    fn blocked_times_sit_past_every_real_time_and_come_back() {
        for t in [MIN_RUN_AT, -1, 0, 1_765_000_000_000, MAX_RUN_AT] {
            assert!(!is_blocked(t));
            assert!(blocked(t) > MAX_RUN_AT);
            assert!(is_blocked(blocked(t)));
            assert_eq!(blocked(blocked(t)), blocked(t), "blocking twice is once");
            assert_eq!(own_run_at(blocked(t)), t);
            assert_eq!(own_run_at(t), t);
        }
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        let refused = |j: NewJob| match j.validate() {
            Err(Error::Config(c)) => c.setting,
            other => panic!("not refused: {other:?}"),
        };
        let job = || NewJob::new("q", b"x".to_vec());
        assert_eq!(refused(job().ordering_key("")), "ordering_key");
        assert_eq!(refused(job().ordering_key("a\0")), "ordering_key");
        assert_eq!(refused(job().ordering_key("k".repeat(256))), "ordering_key");
        job().ordering_key("k".repeat(255)).validate().unwrap();
        job().ordering_key("k").unique_key("u").validate().unwrap();
        let mixed = vec![job().ordering_key("k"), job().unique_key("u")];
        crate::CheckedJobs::check(mixed).expect("unique and ordering keys go together");
    }
}
