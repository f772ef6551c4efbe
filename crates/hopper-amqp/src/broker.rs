//! [`AmqpBroker`]: the [`Broker`] implementation over RabbitMQ.
//!
//! RabbitMQ pushes; Hopper's worker fetches. The broker joins the two: each subscription
//! (one per queue per process, see the crate's `subscription` module) moves the
//! server's deliveries into a local buffer and bumps the wake signal, and a fetch takes
//! from those buffers without a round trip. So the worker's whole runtime (concurrency,
//! batch handlers, grouped settlements, graceful shutdown, statistics) works unchanged,
//! while the window that bounds what this process holds is the server's `basic.qos`.
//!
//! Here: the broker's state, connecting and closing, and the [`Broker`] implementation.
//! Its longer calls live beside what they use, in submodules:
//! - `publish`: publishing on a confirm channel, and which message came back unroutable;
//! - `fetch`: opening a queue's subscription, and a fetch taking from its buffer;
//! - `settle`: settlements grouped by the channel their deliveries came on;
//! - `admin`: counts, statistics, purges and deleting queues;
//! - `redrive`: dead letters moved back to their queue or discarded, a chunk at a time;
//! - `pause`: pausing a queue for every worker, and listening for pauses.

mod admin;
mod fetch;
mod pause;
mod publish;
mod redrive;
mod settle;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::{
    AdminCalls, Broker, CancelOutcome, Capabilities, CheckedJobs, Enqueued, Error, FetchRequest,
    Fetched, JobId, JobRecord, LeaseId, QueueCounts, QueueStatus, Result, Selection, SettleReport,
    Settlement,
};
use tokio::sync::watch;

use self::publish::{Outgoing, Published};
use crate::conn::Link;
use crate::control::PauseSignals;
use crate::options::AmqpOptions;
use crate::subscription::Subscription;
use crate::topology::{Topology, retry_bucket};
use crate::wire;

/// The RabbitMQ broker. Cheap to share behind an `Arc`; dropping the last handle closes
/// its subscriptions (the server requeues what they held) and its connection.
#[derive(Debug)]
pub struct AmqpBroker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    link: Arc<Link>,
    topology: Arc<Topology>,
    subs: Mutex<HashMap<String, Arc<Subscription>>>,
    /// Held while a subscription is being opened, so two callers never open two.
    opening: tokio::sync::Mutex<()>,
    wake: watch::Sender<u64>,
    /// What each subscription watches to hear of its queue's pause.
    signals: Arc<PauseSignals>,
    /// The task listening for pause announcements, from the first subscription on.
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.link
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.stop_listening();
        let subs: Vec<_> = self.subs_map().drain().map(|(_, s)| s).collect();
        let link = self.link.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for sub in subs {
                    sub.close().await;
                }
                link.close().await;
            });
        }
    }
}

impl Inner {
    fn stop_listening(&self) {
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = listener {
            task.abort();
        }
    }

    fn subs_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Subscription>>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sub(&self, queue: &str) -> Option<Arc<Subscription>> {
        self.subs_map().get(queue).cloned()
    }

    fn sub_of_generation(&self, generation: u64) -> Option<Arc<Subscription>> {
        self.subs_map()
            .values()
            .find(|s| s.state().generation == generation)
            .cloned()
    }
}

impl AmqpBroker {
    /// Connects with the default options, read over by the URL's own settings
    /// (`?prefetch=N&declare=true&queue_type=quorum&confirms=false`).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, AmqpOptions::default()).await
    }

    /// Connects with `options`, read over by the URL's own settings.
    pub async fn connect_with(url: &str, options: AmqpOptions) -> Result<Self> {
        let mut parsed = hopper_core::BrokerUrl::parse(
            url,
            &["amqp"],
            "amqp://USER:PASSWORD@HOST:PORT/VHOST (this build has no TLS, so no amqps://)",
        )?;
        let connect_timeout = parsed.take_connect_timeout()?;
        let options = options.with_url_settings(url)?;
        options.validate()?;
        let link = Arc::new(Link::new(&parsed, connect_timeout, &options));
        link.connection().await?;
        let (wake, _) = watch::channel(0);
        Ok(AmqpBroker {
            inner: Arc::new(Inner {
                link,
                topology: Arc::new(Topology::new(options)),
                subs: Mutex::new(HashMap::new()),
                opening: tokio::sync::Mutex::new(()),
                wake,
                signals: Arc::new(PauseSignals::default()),
                listener: Mutex::new(None),
            }),
        })
    }

    /// The options in force (the URL's settings applied).
    pub fn options(&self) -> &AmqpOptions {
        self.inner.topology.options()
    }

    /// Closes every subscription (the server requeues what they held) and the connection.
    /// [`settle`](Broker::settle) returns once its acknowledgements are queued on the
    /// connection, not written; closing waits for the server's answer to each close, which
    /// comes after every frame queued before it, so call this before the process exits.
    pub async fn close(&self) {
        self.inner.stop_listening();
        let subs: Vec<_> = self.inner.subs_map().drain().map(|(_, s)| s).collect();
        for sub in subs {
            sub.close().await;
        }
        self.inner.link.close().await;
    }
}

#[async_trait]
impl Broker for AmqpBroker {
    fn capabilities(&self) -> Capabilities {
        // No unique keys: RabbitMQ cannot look a message up by key, so there is nothing to
        // find a key's holder with, and core refuses jobs that carry one.
        Capabilities::pushed("amqp").with_admin(AdminCalls::PUSHED)
    }

    fn limits(&self) -> hopper_core::Limits {
        hopper_core::Limits {
            max_payload: self.options().max_payload,
        }
    }

    async fn enqueue_checked(&self, jobs: CheckedJobs) -> Result<Vec<Enqueued>> {
        let mut queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        for q in queues {
            self.inner
                .topology
                .ensure_queue(&self.inner.link, q)
                .await?;
        }
        let now = wire::now_ms();
        let mut ids = Vec::with_capacity(jobs.len());
        let mut out = Vec::with_capacity(jobs.len());
        // Each message's queue and retry bucket, to declare them again if they were deleted.
        let mut routes = Vec::with_capacity(jobs.len());
        for job in jobs {
            let id = wire::next_enqueue_id(now);
            let run_at = job.run_at_millis(now);
            let bucket = retry_bucket(Duration::from_millis((run_at - now).max(0) as u64));
            let routing_key = match bucket {
                Some(ms) => {
                    self.inner
                        .topology
                        .ensure_retry(&self.inner.link, &job.queue, ms)
                        .await?
                }
                None => job.queue.clone(),
            };
            let properties = wire::properties(Some(&id.0.to_string()), &job, now, run_at, 0, None);
            ids.push(id);
            out.push(Outgoing {
                exchange: String::new(),
                routing_key,
                payload: job.payload,
                properties,
            });
            routes.push((job.queue, bucket));
        }
        let mut results = self.publish(&out).await?;
        let unroutable = |r: &Published| matches!(r, Published::Unroutable(_));
        if self.inner.topology.declares() && results.iter().any(unroutable) {
            // A queue this process declared was deleted since (by an operator, say):
            // declare what those messages need again and publish them once more. Each
            // refusal already made the topology forget its queue. Only messages no queue
            // took go again, so none is published twice.
            let refused: Vec<usize> = (0..results.len())
                .filter(|&i| unroutable(&results[i]))
                .collect();
            let mut again = Vec::with_capacity(refused.len());
            for &i in &refused {
                let (queue, bucket) = &routes[i];
                self.inner
                    .topology
                    .ensure_queue(&self.inner.link, queue)
                    .await?;
                if let Some(ms) = *bucket {
                    self.inner
                        .topology
                        .ensure_retry(&self.inner.link, queue, ms)
                        .await?;
                }
                again.push(out[i].clone());
            }
            for (i, r) in refused.into_iter().zip(self.publish(&again).await?) {
                results[i] = r;
            }
        }
        for r in results {
            r.into_result()?;
        }
        // Every message is stored: without unique keys no job is a duplicate.
        Ok(ids.into_iter().map(Enqueued::stored).collect())
    }

    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        self.take_buffered(request).await
    }

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        self.settle_by_channel(settlements).await
    }

    async fn renew(&self, _leases: &[LeaseId], _ttl: Duration) -> Result<Vec<LeaseId>> {
        // No leases: a delivery is held as long as its channel is open.
        Ok(Vec::new())
    }

    async fn cancel(&self, _id: JobId) -> Result<CancelOutcome> {
        Err(Error::NotSupported {
            broker: "amqp",
            what: "cancelling a queued message",
        })
    }

    async fn job(&self, _id: JobId) -> Result<Option<JobRecord>> {
        Err(Error::NotSupported {
            broker: "amqp",
            what: "looking up a job by id",
        })
    }

    async fn counts(&self, queue: &str) -> Result<QueueCounts> {
        self.count_queue(queue).await
    }

    async fn dead_letters(&self, _queue: &str, _limit: usize) -> Result<Vec<JobRecord>> {
        Err(Error::NotSupported {
            broker: "amqp",
            what: "listing dead letters (read the dead-letter queue with any AMQP client)",
        })
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        self.purge_queue(queue).await
    }

    async fn subscribe(&self, queue: &str, window: Option<u32>) -> Result<()> {
        self.subscribe_queue(queue, window).await
    }

    async fn unsubscribe(&self, queue: &str) -> Result<()> {
        let sub = self.inner.subs_map().remove(queue);
        self.inner.signals.forget(queue);
        if let Some(sub) = sub {
            sub.close().await;
        }
        Ok(())
    }

    async fn retry_dead(&self, which: &Selection) -> Result<u64> {
        self.redrive(which, true).await
    }

    async fn discard_dead(&self, which: &Selection) -> Result<u64> {
        self.redrive(which, false).await
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<bool> {
        self.pause_queue(queue, paused).await
    }

    async fn queues(&self) -> Result<Vec<String>> {
        Err(self.not_supported(
            "listing queues (AMQP cannot enumerate a server's queues; name the queue)",
        ))
    }

    async fn queue_stats(&self, queue: &str) -> Result<QueueStatus> {
        self.stats(queue).await
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.wake.subscribe())
    }
}
