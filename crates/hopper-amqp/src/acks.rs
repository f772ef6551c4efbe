//! Which acknowledgements a subscription sends now and which it holds back.
//!
//! RabbitMQ spends far more on an acknowledgement frame than on a delivery: on this
//! project's bench host a consumer acking each message ran at about 12k msgs/s and one
//! acking half its window at a time at 60–80k. A `basic.ack` with `multiple` covers every
//! unacknowledged tag up to its own, so it may only name a tag below the lowest delivery
//! this process still holds unsettled. Handlers finish out of order, so an ack above that
//! delivery is *held*: the `multiple` ack sent once the delivery below it settles covers it
//! too. Held acks still count against the server's window, so they are sent one by one when
//! they fill half of it ([`hold_limit`]) or after the broker's `ack_hold` at most
//! ([`AmqpOptions::ack_hold`](crate::AmqpOptions::ack_hold)), which also bounds how many
//! finished jobs run again if the connection drops meanwhile.

use std::time::{Duration, Instant};

/// How many held acks a subscription without a window (no `basic.qos`) keeps at most.
const UNLIMITED_WINDOW_HOLD: usize = 512;

/// The most acks held back under `window`: half of it (as a consumer acking with
/// `multiple` at half its window does), so the server always has room to push.
pub(crate) fn hold_limit(window: Option<u16>) -> usize {
    window.map_or(UNLIMITED_WINDOW_HOLD, |w| usize::from(w / 2).max(1))
}

/// The acks of one channel settled here and not sent yet, by delivery tag.
#[derive(Debug, Default)]
pub(crate) struct HeldAcks {
    /// The longest an ack is held before it goes on its own.
    hold: Duration,
    /// In no order: a settlement batch hands over its acks as its handlers finished, and
    /// sorting them is left to the rare batch that sends them one by one. A tag given twice
    /// (never, from a subscription) counts twice towards the limit but is sent once.
    tags: Vec<u64>,
    /// When the oldest held ack was first held.
    since: Option<Instant>,
}

/// The frames to send, in this order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct AckFrames {
    /// One `multiple` ack up to this tag.
    pub(crate) multiple: Option<u64>,
    /// Single acks.
    pub(crate) singles: Vec<u64>,
}

impl AckFrames {
    pub(crate) fn is_empty(&self) -> bool {
        self.multiple.is_none() && self.singles.is_empty()
    }

    /// `(tag, multiple)` per frame.
    pub(crate) fn frames(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        let singles = self.singles.iter().map(|&t| (t, false));
        self.multiple.map(|t| (t, true)).into_iter().chain(singles)
    }
}

impl HeldAcks {
    pub(crate) fn new(hold: Duration) -> Self {
        HeldAcks {
            hold,
            ..HeldAcks::default()
        }
    }

    /// Acks held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tags.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }

    /// Forgets every held ack: their channel is gone, and the server has them back.
    pub(crate) fn clear(&mut self) {
        self.tags.clear();
        self.since = None;
    }

    /// Takes in `acked` (tags just settled as acks) and says what to send, given `low`, the
    /// lowest tag still unsettled (`u64::MAX` for none): one `multiple` ack covering every
    /// ack below `low`, and, when the acks left above it reach `limit`, have waited the
    /// hold, or `flush` asks for it, each of those on its own.
    pub(crate) fn plan(
        &mut self,
        acked: impl IntoIterator<Item = u64>,
        low: u64,
        limit: usize,
        now: Instant,
        flush: bool,
    ) -> AckFrames {
        self.tags.extend(acked);
        let mut multiple = None;
        self.tags.retain(|&tag| {
            let below = tag < low;
            if below {
                multiple = multiple.max(Some(tag));
            }
            !below
        });
        let expired = self.since.is_some_and(|t| now >= t + self.hold);
        let full = self.tags.len() >= limit.max(1);
        let singles = if flush || expired || full || self.hold.is_zero() {
            let mut singles = std::mem::take(&mut self.tags);
            singles.sort_unstable();
            // A tag acknowledged twice would close the channel.
            singles.dedup();
            singles
        } else {
            Vec::new()
        };
        // Whatever is still held after an expiry is newer than the hold (nothing, as an
        // expiry sends every held ack), so the clock restarts only from empty.
        self.since = if self.tags.is_empty() {
            None
        } else {
            self.since.or(Some(now))
        };
        AckFrames { multiple, singles }
    }

    /// When the oldest held ack is due to go out on its own.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.since.map(|t| t + self.hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_millis(100);

    fn plan(h: &mut HeldAcks, acked: &[u64], low: u64, limit: usize, at: Instant) -> AckFrames {
        h.plan(acked.iter().copied(), low, limit, at, false)
    }

    #[test]
    fn acks_below_the_lowest_unsettled_go_in_one_multiple_frame() {
        let mut h = HeldAcks::new(HOLD);
        let f = plan(&mut h, &[3, 1, 2, 5], 7, 10, Instant::now());
        assert_eq!(f.multiple, Some(5));
        assert!(f.singles.is_empty());
        assert_eq!(h.len(), 0);
        assert_eq!(h.due(), None);
    }

    #[test]
    fn acks_above_an_unsettled_delivery_wait_and_are_covered_once_it_settles() {
        let mut h = HeldAcks::new(HOLD);
        let t0 = Instant::now();
        // Tag 1 still runs: 2 and 3 are held, nothing is sent.
        let f = plan(&mut h, &[2, 3], 1, 10, t0);
        assert!(f.is_empty());
        assert_eq!(h.len(), 2);
        assert_eq!(h.due(), Some(t0 + HOLD));
        // Tag 1 settles; 4 still runs: one frame, multiple up to 3.
        let f = plan(&mut h, &[1], 4, 10, t0 + Duration::from_millis(10));
        assert_eq!(f.multiple, Some(3));
        assert!(f.singles.is_empty());
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn held_acks_reaching_the_limit_go_one_by_one() {
        let mut h = HeldAcks::new(HOLD);
        let t0 = Instant::now();
        assert!(plan(&mut h, &[2, 3], 1, 3, t0).is_empty());
        let f = plan(&mut h, &[5], 1, 3, t0);
        assert_eq!(f.multiple, None);
        assert_eq!(f.singles, vec![2, 3, 5]);
        assert_eq!(h.len(), 0);
        assert_eq!(h.due(), None);
    }

    #[test]
    fn held_acks_go_out_in_tag_order_and_once_each() {
        let mut h = HeldAcks::new(HOLD);
        let t0 = Instant::now();
        assert!(plan(&mut h, &[9, 4, 7], 2, 100, t0).is_empty());
        let f = h.plan([4, 6], 2, 100, t0, true);
        assert_eq!(f.singles, vec![4, 6, 7, 9]);
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_held_ack_goes_out_alone_once_it_waited_the_hold() {
        let mut h = HeldAcks::new(HOLD);
        let t0 = Instant::now();
        assert!(plan(&mut h, &[4], 2, 100, t0).is_empty());
        // Within the hold another ack above the unsettled tag 2 joins it.
        assert!(plan(&mut h, &[3], 2, 100, t0 + HOLD / 2).is_empty());
        assert_eq!(
            h.due(),
            Some(t0 + HOLD),
            "the oldest held ack sets the deadline"
        );
        let f = plan(&mut h, &[], 2, 100, t0 + HOLD);
        assert_eq!(f.singles, vec![3, 4]);
        assert_eq!(h.due(), None);
    }

    #[test]
    fn a_flush_sends_everything_and_mixes_both_kinds() {
        let mut h = HeldAcks::new(HOLD);
        let t0 = Instant::now();
        assert!(plan(&mut h, &[6, 9], 5, 100, t0).is_empty());
        let f = h.plan([2, 3], 5, 100, t0, true);
        assert_eq!(f.multiple, Some(3));
        assert_eq!(f.singles, vec![6, 9]);
        assert_eq!(
            f.frames().collect::<Vec<_>>(),
            vec![(3, true), (6, false), (9, false)]
        );
    }

    #[test]
    fn without_a_hold_every_ack_goes_at_once() {
        let mut h = HeldAcks::new(Duration::ZERO);
        let f = plan(&mut h, &[2, 3, 7], 4, 100, Instant::now());
        assert_eq!(f.multiple, Some(3));
        assert_eq!(f.singles, vec![7]);
        assert_eq!(h.due(), None);
    }

    #[test]
    fn the_limit_is_half_the_window_and_never_zero() {
        assert_eq!(hold_limit(Some(1000)), 500);
        assert_eq!(hold_limit(Some(3)), 1);
        assert_eq!(hold_limit(Some(1)), 1);
        assert_eq!(hold_limit(None), UNLIMITED_WINDOW_HOLD);
    }
}
