//! Pushed brokers (RabbitMQ): one subscription per queue, opened with the queue's window
//! and re-sent whenever the Auto rule resizes it; closed when a queue pauses and once
//! everything is settled at shutdown (docs/design.md, "Pushed windows").

use tokio::time::Instant;

use super::queue::QueueState;
use super::{Event, EventLoop};
use crate::error::Result;
use crate::prefetch::{AutoSizer, Prefetch};
use crate::worker::STOP_SETTLE_LIMIT;
use crate::worker::stats::{WorkerStats, push_size};

/// The window a pushed broker's subscription gets: the queue's `prefetch`, else `None`
/// for the broker's own default.
pub(super) fn pushed_window(q: &QueueState) -> Option<u32> {
    let n = match q.opts.prefetch? {
        Prefetch::Fixed(n) => n,
        Prefetch::Slots => q.opts.concurrency * q.per_slot(),
        Prefetch::Auto => q.opts.concurrency * q.sizer.as_ref().map_or(1, AutoSizer::size),
    };
    Some(u32::try_from(n).unwrap_or(u32::MAX))
}

impl EventLoop {
    /// Opens each queue's subscription on a pushed broker, and re-sends the window when it
    /// changed (the Auto rule resizing it). One call per queue at a time, so windows reach
    /// the broker in the order they were decided.
    pub(super) fn maybe_subscribe(&mut self, st: &mut WorkerStats) {
        if !self.intake.pushed() || self.stopping.is_some() {
            return;
        }
        for qi in 0..self.queues.len() {
            let q = &self.queues[qi];
            if q.paused || q.subscribing {
                continue;
            }
            let window = pushed_window(q);
            if q.window_sent == Some(window) {
                continue;
            }
            let q = &mut self.queues[qi];
            q.window_sent = Some(window);
            q.subscribing = true;
            if let Some(w) = window {
                let qs = st.queues.entry(q.name.clone()).or_default();
                push_size(&mut qs.windows, w as usize);
            }
            let (broker, events, name) = (self.broker.clone(), self.events.clone(), q.name.clone());
            tokio::spawn(async move {
                let result = broker.subscribe(&name, window).await;
                let _ = events.send(Event::Subscribed { queue: qi, result });
            });
        }
    }

    /// Closes a paused queue's subscription, so the server gives its deliveries to others.
    /// While a `subscribe` is still in flight it waits for its answer: sent now, the
    /// `unsubscribe` could reach the broker first and leave the subscription open.
    pub(super) fn unsubscribe_paused(&mut self, qi: usize) {
        let q = &mut self.queues[qi];
        if !self.intake.pushed() || q.window_sent.is_none() || q.subscribing {
            return;
        }
        q.window_sent = None;
        q.subscribing = true;
        q.subscribed = false;
        let (broker, events, name) = (self.broker.clone(), self.events.clone(), q.name.clone());
        tokio::spawn(async move {
            let result = broker.unsubscribe(&name).await;
            let _ = events.send(Event::Subscribed { queue: qi, result });
        });
    }

    /// A `subscribe` or `unsubscribe` returned.
    pub(super) fn subscribed(&mut self, qi: usize, result: Result<()>) {
        let q = &mut self.queues[qi];
        q.subscribing = false;
        q.subscribed = q.window_sent.is_some();
        if let Err(e) = result {
            tracing::error!(queue = %q.name, error = %e.chain(), "subscribing failed");
        }
        if q.paused {
            // Paused while its subscription was being opened or resized.
            self.unsubscribe_paused(qi);
        }
    }

    /// The Auto rule on a pushed broker, where taking from what arrived costs nothing and
    /// says little. A take is *full* when the subscription's whole window is in use for this
    /// worker: buffered, handed off, settled and not yet applied, or settled since the last
    /// take (the server has that acknowledgement, but its replacement is still on the
    /// wire). The server would push more if the window let it, so that counts as a full
    /// fetch and the window grows after two. Any other take is no evidence either way, so
    /// it leaves the size alone; the job times still shrink it at once through `wanted`.
    /// Without the settlements since the last take, a slot that takes its next job as its
    /// last one's ack goes out never sees its window full past 2.
    pub(super) fn size_pushed_windows(&mut self, asked: &[(usize, usize)], got: &[usize]) {
        for &(qi, n) in asked {
            let window = self.window(&self.queues[qi]);
            let q = &mut self.queues[qi];
            let out = q.buffer.len() + q.in_handoffs + q.settling + q.freed_since_take;
            q.freed_since_take = 0;
            if let Some(sizer) = q.sizer.as_mut() {
                if got[qi] > 0 && out >= window {
                    sizer.fetched(n, n);
                }
            }
        }
    }

    /// Says at start which batch queues can never fill a batch: a batch closes at the
    /// window when the window is smaller (the server pushes no more than it).
    pub(super) fn warn_capped_batches(&self) {
        for q in &self.queues {
            let Some((size, wait)) = q.opts.batch else {
                continue;
            };
            if q.opts.prefetch == Some(Prefetch::Auto) {
                continue; // the window grows with the job times; a warning would be noise
            }
            let window = if self.intake.pushed() {
                pushed_window(q).map(|w| w as usize)
            } else {
                Some(self.window(q))
            };
            if let Some(window) = window.filter(|&w| w < size) {
                tracing::warn!(
                    queue = %q.name,
                    window,
                    batch_size = size,
                    "the window caps the batch: batches of this queue close at {window} jobs \
                     (or {wait:?} after their first), never at {size}; raise prefetch to at \
                     least the batch size to fill them"
                );
            }
        }
    }

    /// Closes every subscription once the loop has stopped. Only then, with every
    /// settlement applied: closing one earlier would hand back jobs whose handlers are still
    /// finishing in the grace period, and their acknowledgements would then be refused.
    pub(super) async fn close_subscriptions(&mut self) {
        if !self.intake.pushed() {
            return;
        }
        // One limit for every queue together, so a hung connection holds the stop up
        // once, not once per queue.
        let closed_by = Instant::now() + STOP_SETTLE_LIMIT;
        for q in &self.queues {
            let closing = self.broker.unsubscribe(&q.name);
            match tokio::time::timeout_at(closed_by, closing).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(queue = %q.name, error = %e.chain(), "closing the subscription failed");
                }
                Err(_) => {
                    tracing::warn!(queue = %q.name, waited = ?STOP_SETTLE_LIMIT, "closing the subscription did not finish; leaving it");
                }
            }
        }
    }
}
