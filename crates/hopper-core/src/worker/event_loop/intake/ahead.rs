//! The rules by which a pulled queue keeps fetches in flight: how far ahead of its slots
//! it fetches, how much each fetch ahead asks for, and when fetches stop going out side by
//! side because they only queue at the broker (docs/design.md, "Round trips in flight").

use std::time::Duration;

use super::{Intake, Mode, Sent, moving_average};
use crate::prefetch::AutoSizer;
use crate::worker::MAX_FETCHES_IN_FLIGHT;
use crate::worker::event_loop::queue::QueueState;

impl Intake {
    /// Jobs the slots of `q` complete in two fetch round trips, which a pulled queue with
    /// the default window or `Prefetch::Auto` fetches ahead of its slots so that they never
    /// wait on the network: 2 × concurrency × round trip ÷ time per job, at most one fetch
    /// for each fetch past the first that may be in flight. Two round trips, not one: the
    /// next fetch goes out once half a fetch of room is free, so what is buffered and
    /// coming must last a round trip from then. 0 until a fetch and a job were timed, for
    /// any other broker or policy, and for batch and `pop_ahead` queues, which keep their
    /// own rules (docs/design.md, "Round trips in flight"). Auto's job time is its own
    /// average, and it fetches ahead by whole fetches of its current size; the default
    /// window's job time is the last timed hand-off's.
    #[inline]
    pub(in crate::worker::event_loop) fn ahead(
        &self,
        q: &QueueState,
        job_time: Option<Duration>,
    ) -> usize {
        let auto = q.sizer.as_ref();
        if self.mode != Mode::Pulled
            || (q.opts.prefetch.is_some() && auto.is_none())
            || q.opts.batch.is_some()
            || q.opts.pop_ahead
        {
            return 0;
        }
        let job_time = match auto {
            Some(sizer) => sizer.average(),
            None => job_time,
        };
        let (Some(rtt), Some(per_job)) = (self.rtt, job_time) else {
            return 0;
        };
        let unit = Self::fetch_unit(q);
        let cap = unit * (MAX_FETCHES_IN_FLIGHT - 1);
        if per_job.is_zero() {
            return cap;
        }
        let covered = 2 * q.opts.concurrency as u128 * rtt.as_nanos();
        if auto.is_some() {
            // Whole fetches, rounded down: where the round trip is short against the work
            // (less than a fetch's worth), Auto keeps one fetch at a time and its sizes
            // stay exactly those of its rule.
            let fetches = covered / (per_job.as_nanos() * unit as u128);
            return fetches.min(MAX_FETCHES_IN_FLIGHT as u128 - 1) as usize * unit;
        }
        covered.div_ceil(per_job.as_nanos()).min(cap as u128) as usize
    }

    /// The most one fetch of `q` asks for when it fetches ahead: Auto's current size, else
    /// `max_batch`.
    #[inline]
    pub(super) fn fetch_unit(q: &QueueState) -> usize {
        q.sizer
            .as_ref()
            .map_or(q.opts.max_batch, AutoSizer::size)
            .min(q.opts.max_batch)
    }

    /// How many jobs a queue that fetches ahead asks for: what its window has room for,
    /// counting what fetches in flight will bring, once that room is half a fetch, or at
    /// once when its slots would otherwise run dry before the fetches in flight arrive.
    /// Beside a fetch in flight only while the last one came back full.
    #[inline]
    pub(super) fn want_ahead(q: &QueueState, window: usize) -> usize {
        if q.asked > 0 && !q.full {
            // Not known to have a backlog (just woken, say): one fetch finds out first.
            return 0;
        }
        let room = window.saturating_sub(q.buffer.len() + q.in_handoffs + q.asked);
        let full = window.min(Self::fetch_unit(q));
        let free = q.opts.concurrency.saturating_sub(q.busy);
        let starving = q.buffer.len() + q.asked < free;
        if room == 0 || (!starving && room < full.div_ceil(2)) {
            return 0;
        }
        room.min(Self::fetch_unit(q))
    }

    /// Whether fetches wait at the broker behind others' work: their round trip, less what
    /// this worker's own fetches sent before them explain (a fetch sent beside two others
    /// may take three times as long), has grown past three times the shortest seen, and
    /// the whole round trip past twice its shortest. Then another fetch beside those in
    /// flight would only queue there and, with several workers on one table, contend with
    /// their claims, so none is sent until the round trip comes down. A worker alone, whose
    /// own fetches queue behind each other, keeps them all in flight.
    ///
    /// The second test keeps a worker far from its broker fetching ahead: there fetches
    /// side by side take no longer than one alone, so the shortest divided time is a
    /// fraction of the distance, and a fetch sent alone, timed at the whole distance,
    /// would look queued for good (PostgreSQL 5 ms away at concurrency 100 fell to one
    /// fetch at a time, 13.9k jobs/s against 40k).
    #[inline]
    pub(super) fn queued(&self) -> bool {
        grew(self.per_fetch, self.per_fetch_min, 3) && grew(self.rtt, self.rtt_min, 2)
    }

    /// Takes in the round trip of a fetch sent at `sent`: the moving average every fetch
    /// feeds, and the times [`Intake::queued`] compares, from fetches of at least half the
    /// largest ask.
    pub(super) fn time(&mut self, rtt: Duration, sent: Sent) {
        self.rtt = Some(moving_average(self.rtt, rtt));
        if sent.jobs > 2 * self.largest_ask {
            // Far larger than any before: the times so far do not compare.
            (self.per_fetch, self.per_fetch_min, self.rtt_min) = (None, None, None);
        }
        self.largest_ask = self.largest_ask.max(sent.jobs);
        if 2 * sent.jobs >= self.largest_ask {
            let own = rtt / (sent.beside as u32 + 1);
            self.per_fetch = Some(moving_average(self.per_fetch, own));
            self.per_fetch_min = Some(self.per_fetch_min.map_or(own, |m| m.min(own)));
            self.rtt_min = Some(self.rtt_min.map_or(rtt, |m| m.min(rtt)));
        }
    }
}

/// Whether the moving average `avg` has passed `by` times the shortest time `min`.
fn grew(avg: Option<Duration>, min: Option<Duration>, by: u32) -> bool {
    matches!((avg, min), (Some(avg), Some(min)) if avg > by * min)
}
