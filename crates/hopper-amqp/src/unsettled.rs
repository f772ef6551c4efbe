//! The deliveries of one channel that this process holds unsettled, by delivery tag.
//!
//! The server numbers a channel's deliveries 1, 2, 3, …, so they are kept in a ring indexed
//! by tag: taking in the next delivery and settling any one cost O(1) and move nothing, and
//! the lowest tag still unsettled (which bounds a `multiple` ack) is the ring's front. A
//! `BTreeMap` moved up to a node's worth of deliveries on each removal.

use std::collections::VecDeque;

use hopper_core::Job;

/// A delivery this process holds unsettled: what a retry or dead-letter copy needs.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) job: Job,
    pub(crate) message_id: Option<String>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Unsettled {
    /// The tag of `slots[0]`; meaningless while `slots` is empty.
    base: u64,
    /// One slot per tag from `base` on: `None` for a tag settled, or never delivered here.
    /// Never starts or ends with `None`.
    slots: VecDeque<Option<Held>>,
    len: usize,
}

impl Unsettled {
    /// Deliveries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The lowest tag held.
    pub(crate) fn lowest(&self) -> Option<u64> {
        (!self.slots.is_empty()).then_some(self.base)
    }

    /// Holds `held` under `tag`; one already held under that tag is replaced. Tags arrive in
    /// ascending order on a channel; one below the lowest held, or past a gap, is still kept.
    pub(crate) fn insert(&mut self, tag: u64, held: Held) {
        if self.slots.is_empty() {
            self.base = tag;
        }
        if tag < self.base {
            for _ in tag..self.base {
                self.slots.push_front(None);
            }
            self.base = tag;
        }
        let index = (tag - self.base) as usize;
        while self.slots.len() <= index {
            self.slots.push_back(None);
        }
        if self.slots[index].replace(held).is_none() {
            self.len += 1;
        }
    }

    pub(crate) fn get(&self, tag: u64) -> Option<&Held> {
        let index = usize::try_from(tag.checked_sub(self.base)?).ok()?;
        self.slots.get(index)?.as_ref()
    }

    /// Settles `tag`: its delivery, if held.
    pub(crate) fn remove(&mut self, tag: u64) -> Option<Held> {
        let index = usize::try_from(tag.checked_sub(self.base)?).ok()?;
        let held = self.slots.get_mut(index)?.take()?;
        self.len -= 1;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        while let Some(None) = self.slots.back() {
            self.slots.pop_back();
        }
        Some(held)
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
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
            job,
            message_id: None,
        }
    }

    fn tags(u: &Unsettled) -> Vec<u64> {
        (0..u.slots.len() as u64)
            .map(|i| u.base + i)
            .filter(|&t| u.get(t).is_some())
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
        assert_eq!(u.remove(3).map(|h| h.job.priority), Some(3));
        assert_eq!(u.remove(3).map(|h| h.job.priority), None, "settled once");
        assert_eq!((u.len(), u.lowest()), (4, Some(1)));
        u.remove(1);
        assert_eq!(u.lowest(), Some(2));
        u.remove(2);
        assert_eq!(u.lowest(), Some(4), "past the settled 3");
        assert_eq!(tags(&u), vec![4, 5]);
        assert_eq!(u.get(5).map(|h| h.job.priority), Some(5));
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
        assert_eq!(u.get(10).map(|h| h.job.priority), Some(100));
        u.remove(13);
        assert_eq!(u.slots.len(), 3, "no empty slot kept past the highest tag");
        u.clear();
        assert_eq!((u.len(), u.lowest()), (0, None));
    }
}
