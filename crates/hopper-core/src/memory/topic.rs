//! Topics: publish once, read by every subscription through its own cursor.
//!
//! A topic is one shared log. Publishing appends a payload once, however many subscribers
//! there are. Each [`Subscription`] reads the log through its own cursor, so a slow or
//! paused subscriber delays neither the publisher nor the other subscribers. A payload is
//! kept until every subscription has read it, then dropped from the head of the log.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// A named topic of the memory broker. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Topic {
    inner: Arc<TopicInner>,
}

#[derive(Debug)]
struct TopicInner {
    log: Mutex<Log>,
    /// The sequence number the next publish will get; subscribers wait on its changes.
    published: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Log {
    /// Sequence number of `entries[0]`.
    base: u64,
    entries: VecDeque<Arc<[u8]>>,
    /// Each subscription's next sequence number to read.
    cursors: HashMap<u64, u64>,
    next_subscription: u64,
}

impl Log {
    fn end(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    /// Drops every entry all subscriptions have read.
    fn trim(&mut self) {
        let keep_from = self.cursors.values().copied().min().unwrap_or(self.end());
        while self.base < keep_from && !self.entries.is_empty() {
            self.entries.pop_front();
            self.base += 1;
        }
    }
}

impl Topic {
    pub(crate) fn new() -> Self {
        Topic {
            inner: Arc::new(TopicInner {
                log: Mutex::new(Log::default()),
                published: watch::channel(0).0,
            }),
        }
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.inner.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one payload; every current subscription will read it. Returns its sequence
    /// number. With no subscription the payload is dropped at once: nobody can read it.
    pub fn publish(&self, payload: impl Into<Arc<[u8]>>) -> u64 {
        self.publish_many([payload.into()])
    }

    /// Appends several payloads under one lock and one wake-up. Returns the sequence
    /// number of the last.
    pub fn publish_many(&self, payloads: impl IntoIterator<Item = Arc<[u8]>>) -> u64 {
        let end = {
            let mut log = self.log();
            if log.cursors.is_empty() {
                let n = payloads.into_iter().count() as u64;
                log.base += n;
            } else {
                log.entries.extend(payloads);
            }
            log.end()
        };
        self.inner.published.send_replace(end);
        end.saturating_sub(1)
    }

    /// A new subscription that reads every payload published from now on.
    pub fn subscribe(&self) -> Subscription {
        let mut log = self.log();
        let id = log.next_subscription;
        log.next_subscription += 1;
        let end = log.end();
        log.cursors.insert(id, end);
        Subscription {
            topic: self.clone(),
            id,
            wake: self.inner.published.subscribe(),
            paused: Arc::new(AtomicBool::new(false)),
            resumed: watch::channel(()).0,
        }
    }

    /// Payloads kept because some subscription has not read them yet.
    pub fn retained(&self) -> usize {
        self.log().entries.len()
    }

    /// Subscriptions reading this topic.
    pub fn subscribers(&self) -> usize {
        self.log().cursors.len()
    }
}

/// One reader of a [`Topic`]. Dropping it stops it holding payloads back.
#[derive(Debug)]
pub struct Subscription {
    topic: Topic,
    id: u64,
    wake: watch::Receiver<u64>,
    paused: Arc<AtomicBool>,
    resumed: watch::Sender<()>,
}

impl Subscription {
    /// Takes up to `max` unread payloads without waiting (an empty vector when none).
    pub fn try_recv_batch(&mut self, max: usize) -> Vec<Arc<[u8]>> {
        if self.paused.load(Ordering::Acquire) || max == 0 {
            return Vec::new();
        }
        let mut log = self.topic.log();
        let cursor = log.cursors[&self.id];
        let from = (cursor - log.base) as usize;
        let to = (from + max).min(log.entries.len());
        let out: Vec<Arc<[u8]>> = log.entries.range(from..to).cloned().collect();
        let was_oldest = cursor == log.base;
        log.cursors.insert(self.id, cursor + out.len() as u64);
        if was_oldest && !out.is_empty() {
            log.trim();
        }
        out
    }

    /// Waits for at least one unread payload, then takes up to `max`.
    pub async fn recv_batch(&mut self, max: usize) -> Vec<Arc<[u8]>> {
        loop {
            self.wait_resumed().await;
            self.wake.borrow_and_update();
            let got = self.try_recv_batch(max.max(1));
            if !got.is_empty() {
                return got;
            }
            let mut resumed = self.resumed.subscribe();
            tokio::select! {
                changed = self.wake.changed() => {
                    if changed.is_err() {
                        return Vec::new();
                    }
                }
                _ = resumed.changed() => {}
            }
        }
    }

    /// Waits for the next payload.
    pub async fn recv(&mut self) -> Arc<[u8]> {
        loop {
            if let Some(p) = self.recv_batch(1).await.pop() {
                return p;
            }
        }
    }

    /// Payloads published but not yet read by this subscription.
    pub fn lag(&self) -> u64 {
        let log = self.topic.log();
        log.end() - log.cursors[&self.id]
    }

    /// Stops reading: `recv` waits until [`resume`](Self::resume). Payloads published
    /// meanwhile are kept for this subscription; the others read on.
    pub fn pause(&self) {
        self.paused.store(true, Ordering::Release);
    }

    /// Reads again from where the subscription paused.
    pub fn resume(&self) {
        self.paused.store(false, Ordering::Release);
        self.resumed.send_replace(());
    }

    async fn wait_resumed(&self) {
        let mut resumed = self.resumed.subscribe();
        while self.paused.load(Ordering::Acquire) {
            if resumed.changed().await.is_err() {
                return;
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut log = self.topic.log();
        log.cursors.remove(&self.id);
        log.trim();
    }
}
