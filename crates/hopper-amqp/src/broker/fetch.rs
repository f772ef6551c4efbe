//! Fetch and subscribe: each queue has one subscription, opened by a worker's `subscribe`
//! or by the first fetch from the queue, and a fetch takes what the subscriptions have
//! buffered, with no round trip to the server.

use hopper_core::job::validate_queue_name;
use hopper_core::{Error, FetchRequest, Fetched, LeaseId, Result};

use super::AmqpBroker;
use crate::options::validate_window;
use crate::subscription::Subscription;

impl AmqpBroker {
    /// [`Broker::fetch`](hopper_core::Broker::fetch): up to each budget from its queue's
    /// buffer, opening the queue's subscription first if it has none.
    pub(super) async fn take_buffered(&self, request: FetchRequest) -> Result<Fetched> {
        let mut jobs = Vec::new();
        for b in &request.budgets {
            let sub = match self.inner.sub(&b.queue) {
                Some(s) => s,
                None => {
                    validate_queue_name(&b.queue)?;
                    let window = self
                        .inner
                        .topology
                        .options()
                        .prefetch
                        .map(|w| validate_window("prefetch", w))
                        .transpose()?;
                    self.open_subscription(&b.queue, window, false).await?;
                    self.inner
                        .sub(&b.queue)
                        .ok_or(Error::Closed("subscription"))?
                }
            };
            let taken = sub.take(b.limit);
            // One queue, the usual case: its jobs are the fetch's, with no second vector.
            if jobs.is_empty() {
                jobs = taken;
            } else {
                jobs.extend(taken);
            }
        }
        Ok(Fetched {
            lease: jobs.first().map_or(LeaseId(0), |j| j.lease),
            jobs,
            next_due: None,
        })
    }

    /// [`Broker::subscribe`](hopper_core::Broker::subscribe): opens the subscription of
    /// `queue`, or re-sizes it to `window` (else the configured default).
    pub(super) async fn subscribe_queue(&self, queue: &str, window: Option<u32>) -> Result<()> {
        validate_queue_name(queue)?;
        let window = match window {
            Some(w) => Some(validate_window(&format!("prefetch of queue {queue}"), w)?),
            None => self
                .inner
                .topology
                .options()
                .prefetch
                .map(|w| validate_window("prefetch", w))
                .transpose()?,
        };
        self.open_subscription(queue, window, true).await
    }

    /// Opens the subscription of `queue`, `window` already validated. When it is open
    /// already, `rewindow` says whether to re-size it: a worker's `subscribe` does, a fetch
    /// that only makes sure a subscription exists must not (it would replace the worker's
    /// window with the default).
    async fn open_subscription(
        &self,
        queue: &str,
        window: Option<u16>,
        rewindow: bool,
    ) -> Result<()> {
        let existing = |this: &Self| {
            this.inner.sub(queue).map(|sub| async move {
                if rewindow {
                    sub.set_window(window).await
                } else {
                    Ok(())
                }
            })
        };
        if let Some(done) = existing(self) {
            return done.await;
        }
        let _opening = self.inner.opening.lock().await;
        if let Some(done) = existing(self) {
            return done.await;
        }
        self.inner
            .topology
            .ensure_queue(&self.inner.link, queue)
            .await?;
        self.ensure_listener().await;
        let (sub, ready) = Subscription::start(
            self.inner.link.clone(),
            self.inner.topology.clone(),
            queue,
            self.inner.topology.kind(queue),
            window,
            self.inner.wake.clone(),
            self.inner.signals.watch(queue),
        )
        .await;
        // Kept even when its first attempt failed: it retries with backoff.
        self.inner.subs_map().insert(queue.to_owned(), sub);
        ready
    }
}
