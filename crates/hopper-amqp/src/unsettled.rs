//! The deliveries of one channel that this process holds unsettled, by delivery tag.
//!
//! The server numbers a channel's deliveries 1, 2, 3, …, so they arrive in tag order and
//! are kept in a queue in that order: the next delivery goes at the back, the lowest tag
//! still unsettled (which bounds a `multiple` ack) is the front, and a tag is found at its
//! offset from the front, or by binary search once settled ones have been compacted away.
//! A settled delivery leaves an empty slot until the front passes it; when empty slots
//! outnumber the deliveries held (one long job at the front, thousands settled behind
//! it), they are compacted away, so the queue never holds more than about twice what is
//! unsettled. A `BTreeMap` moved up to a node's worth of deliveries on each removal.

use std::collections::VecDeque;

use hopper_core::JobCopy;

/// A delivery this process holds unsettled: what a retry, dead-letter or snooze copy
/// needs. The copy leaves the queue's name to the subscription, and keeps a small payload
/// inline.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) copy: JobCopy,
    pub(crate) message_id: Option<String>,
    /// The error of an earlier attempt the message carries, which a snooze copy keeps.
    pub(crate) error: Option<Box<str>>,
}

/// Empty slots kept before a compaction is worth its pass, beyond the deliveries held.
const SLACK: usize = 64;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Unsettled {
    /// By ascending tag; `None` for a delivery settled. Never starts or ends with `None`.
    slots: VecDeque<(u64, Option<Held>)>,
    /// Deliveries held (slots that are `Some`).
    len: usize,
}

impl Unsettled {
    /// Deliveries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The lowest tag held.
    pub(crate) fn lowest(&self) -> Option<u64> {
        self.slots.front().map(|&(tag, _)| tag)
    }

    /// Where `tag`'s slot is, or would go.
    fn position(&self, tag: u64) -> Result<usize, usize> {
        // No gap between the front and the tag: its offset is its index.
        if let Some(&(front, _)) = self.slots.front() {
            if let Some(i) = tag.checked_sub(front).and_then(|d| usize::try_from(d).ok()) {
                if self.slots.get(i).is_some_and(|&(t, _)| t == tag) {
                    return Ok(i);
                }
            }
        }
        self.slots.binary_search_by_key(&tag, |&(t, _)| t)
    }

    /// Holds `held` under `tag`; one already held under that tag is replaced. Tags arrive in
    /// ascending order on a channel; one out of order is still kept in its place.
    pub(crate) fn insert(&mut self, tag: u64, held: Held) {
        if self.slots.back().is_none_or(|&(last, _)| last < tag) {
            self.slots.push_back((tag, Some(held)));
            self.len += 1;
            return;
        }
        match self.position(tag) {
            Ok(i) => {
                if self.slots[i].1.replace(held).is_none() {
                    self.len += 1;
                }
            }
            Err(i) => {
                self.slots.insert(i, (tag, Some(held)));
                self.len += 1;
            }
        }
    }

    pub(crate) fn get(&self, tag: u64) -> Option<&Held> {
        self.slots[self.position(tag).ok()?].1.as_ref()
    }

    /// Settles `tag`: its delivery, if held.
    pub(crate) fn remove(&mut self, tag: u64) -> Option<Held> {
        let i = self.position(tag).ok()?;
        let held = self.slots[i].1.take()?;
        self.len -= 1;
        while self.slots.front().is_some_and(|(_, h)| h.is_none()) {
            self.slots.pop_front();
        }
        while self.slots.back().is_some_and(|(_, h)| h.is_none()) {
            self.slots.pop_back();
        }
        if self.slots.len() > 2 * self.len + SLACK {
            self.slots.retain(|(_, h)| h.is_some());
            // Room for the slots that build up to the next compaction (twice the held ones
            // and the slack), so a steady state neither shrinks nor grows the buffer; only
            // one left far larger by a past surge is shrunk.
            if self.slots.capacity() > 8 * self.len + 4 * SLACK {
                self.slots.shrink_to(4 * self.len + 2 * SLACK);
            }
        }
        Some(held)
    }

    pub(crate) fn clear(&mut self) {
        self.slots = VecDeque::new();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delivery whose priority field carries `mark`, to tell deliveries apart.
    fn held(mark: u64) -> Held {
        let mut job = hopper_testkit::helpers::job(mark as i64, Vec::new());
        job.priority = mark as i32;
        Held {
            copy: JobCopy::new(&job),
            message_id: None,
            error: None,
        }
    }

    fn tags(u: &Unsettled) -> Vec<u64> {
        u.slots
            .iter()
            .filter(|(_, h)| h.is_some())
            .map(|&(t, _)| t)
            .collect()
    }

    #[test]
    fn deliveries_settle_in_any_order_and_the_lowest_follows() {
        let mut u = Unsettled::default();
        assert_eq!(u.lowest(), None);
        for tag in 1..=5 {
            u.insert(tag, held(tag));
        }
        assert_eq!((u.len(), u.lowest()), (5, Some(1)));
        assert_eq!(u.remove(3).map(|h| h.copy.priority()), Some(3));
        assert_eq!(u.remove(3).map(|h| h.copy.priority()), None, "settled once");
        assert_eq!((u.len(), u.lowest()), (4, Some(1)));
        u.remove(1);
        assert_eq!(u.lowest(), Some(2));
        u.remove(2);
        assert_eq!(u.lowest(), Some(4), "past the settled 3");
        assert_eq!(tags(&u), vec![4, 5]);
        assert_eq!(u.get(5).map(|h| h.copy.priority()), Some(5));
        assert!(u.get(2).is_none() && u.get(6).is_none() && u.get(0).is_none());
        u.remove(5);
        u.remove(4);
        assert_eq!((u.len(), u.lowest(), u.slots.len()), (0, None, 0));
        // Empty, it starts again from whatever tag comes next.
        u.insert(40, held(40));
        assert_eq!((u.len(), u.lowest()), (1, Some(40)));
    }

    #[test]
    fn tags_out_of_order_or_past_a_gap_are_kept() {
        let mut u = Unsettled::default();
        u.insert(10, held(10));
        u.insert(13, held(13));
        u.insert(8, held(8));
        assert_eq!(tags(&u), vec![8, 10, 13]);
        assert_eq!((u.len(), u.lowest()), (3, Some(8)));
        u.insert(10, held(100));
        assert_eq!(u.len(), 3, "a tag held again replaces the first");
        u.insert(11, held(11));
        u.remove(11);
        u.insert(11, held(111));
        assert_eq!(
            u.len(),
            4,
            "a settled tag in the middle, held again, counts again"
        );
        u.remove(11);
        assert_eq!(u.get(10).map(|h| h.copy.priority()), Some(100));
        u.remove(13);
        assert_eq!(u.slots.len(), 2, "no empty slot kept past the highest tag");
        u.clear();
        assert_eq!((u.len(), u.lowest()), (0, None));
    }

    #[test]
    fn a_long_delivery_at_the_front_does_not_pin_the_ones_settled_behind_it() {
        let mut u = Unsettled::default();
        let mut most = 0;
        // Tag 1 runs throughout while 100,000 more come and settle, 100 in flight at once.
        u.insert(1, held(1));
        for tag in 2..=100_001u64 {
            u.insert(tag, held(tag));
            if tag > 101 {
                assert_eq!(
                    u.remove(tag - 100).map(|h| h.copy.priority()),
                    Some((tag - 100) as i32)
                );
            }
            most = most.max(u.slots.len());
        }
        assert_eq!(u.len(), 101);
        assert!(most <= 2 * 101 + SLACK + 1, "{most} slots at most");
        let capacity = u.slots.capacity();
        for tag in 100_002..=110_001u64 {
            u.insert(tag, held(tag));
            let grown = u.slots.capacity();
            u.remove(tag - 100);
            assert_eq!(
                (grown, u.slots.capacity()),
                (capacity, capacity),
                "a steady state neither grows nor shrinks its buffer"
            );
        }
        for tag in 109_902..=110_001u64 {
            u.remove(tag);
        }
        for tag in 99_902..=100_001u64 {
            u.insert(tag, held(tag));
        }
        assert_eq!(u.lowest(), Some(1));
        for tag in 99_902..=100_001u64 {
            assert_eq!(u.get(tag).map(|h| h.copy.priority()), Some(tag as i32));
        }
        assert!(u.get(50_000).is_none() && u.remove(50_000).is_none());
        u.remove(1);
        assert_eq!(u.lowest(), Some(99_902));
        assert_eq!(tags(&u), (99_902..=100_001).collect::<Vec<_>>());
    }
}
