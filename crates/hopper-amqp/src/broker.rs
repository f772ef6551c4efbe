//! [`AmqpBroker`]: the [`Broker`] implementation over RabbitMQ.
//!
//! RabbitMQ pushes; Hopper's worker fetches. The broker joins the two: each subscription
//! (one per queue per process, see [`subscription`](crate::subscription)) moves the
//! server's deliveries into a local buffer and bumps the wake signal, and a fetch takes
//! from those buffers without a round trip. So the worker's whole runtime (concurrency,
//! batch handlers, grouped settlements, graceful shutdown, statistics) works unchanged,
//! while the window that bounds what this process holds is the server's `basic.qos`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::future::join_all;
use hopper_core::job::{to_millis, validate_queue_name};
use hopper_core::{
    Broker, CancelOutcome, Capabilities, ConfigError, Error, FetchRequest, Fetched, JobId,
    JobRecord, LeaseId, NewJob, Outcome, QueueCounts, Result, SettleReport, Settlement,
};
use lapin::BasicProperties;
use lapin::Confirmation;
use lapin::options::{
    BasicNackOptions, BasicPublishOptions, BasicRejectOptions, QueueDeclareOptions,
    QueuePurgeOptions,
};
use lapin::types::FieldTable;
use tokio::sync::watch;

use crate::conn::{Link, amqp_err, is_not_found};
use crate::options::{AmqpOptions, validate_window};
use crate::subscription::{Subscription, queue_frame, send_acks};
use crate::topology::{Topology, dead_queue, retry_bucket};
use crate::wire;

/// A message to publish and where.
#[derive(Clone)]
struct Outgoing {
    exchange: String,
    routing_key: String,
    payload: Vec<u8>,
    properties: BasicProperties,
}

/// What became of one published message.
enum Published {
    /// The server confirmed it (or confirms are off).
    Taken,
    /// No queue took it: the queue it was routed to does not exist.
    Unroutable(Error),
    /// Refused, or its fate is unknown (the channel closed before the confirm).
    Failed(Error),
}

impl Published {
    fn into_result(self) -> Result<()> {
        match self {
            Published::Taken => Ok(()),
            Published::Unroutable(e) | Published::Failed(e) => Err(e),
        }
    }
}

/// A message the server returned because no queue took it.
struct Returned<'a> {
    exchange: &'a str,
    routing_key: &'a str,
    message_id: Option<&'a str>,
    data: &'a [u8],
}

impl Returned<'_> {
    /// Which of `messages`, so far `Taken` in `results`, this is: the first with the same
    /// exchange and routing key and its message id, or without an id its bytes.
    fn which(&self, messages: &[Outgoing], results: &[Published]) -> Option<usize> {
        (0..messages.len()).find(|&i| {
            let m = &messages[i];
            matches!(results[i], Published::Taken)
                && self.exchange == m.exchange
                && self.routing_key == m.routing_key
                && match m.properties.message_id() {
                    // Copies keep their delivery's id, so ids alone may repeat.
                    Some(id) => self.message_id == Some(id.as_str()),
                    None => self.data == m.payload.as_slice(),
                }
        })
    }
}

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
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.link
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
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

fn now_ms() -> i64 {
    to_millis(SystemTime::now())
}

impl AmqpBroker {
    /// Connects with the default options, read over by the URL's own settings
    /// (`?prefetch=N&declare=true&queue_type=quorum&confirms=false`).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, AmqpOptions::default()).await
    }

    /// Connects with `options`, read over by the URL's own settings.
    pub async fn connect_with(url: &str, options: AmqpOptions) -> Result<Self> {
        let scheme = url.split_once("://").map(|(s, _)| s);
        if scheme != Some("amqp") {
            return Err(Error::Config(ConfigError::new(
                "broker URL",
                hopper_core::redact_url(url),
                "amqp://USER:PASSWORD@HOST:PORT/VHOST (this build has no TLS, so no amqps://)",
            )));
        }
        let options = options.with_url_settings(url)?;
        options.validate()?;
        let link = Arc::new(Link::new(url, &options));
        link.connection().await?;
        let (wake, _) = watch::channel(0);
        Ok(AmqpBroker {
            inner: Arc::new(Inner {
                link,
                topology: Arc::new(Topology::new(options)),
                subs: Mutex::new(HashMap::new()),
                opening: tokio::sync::Mutex::new(()),
                wake,
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
        let subs: Vec<_> = self.inner.subs_map().drain().map(|(_, s)| s).collect();
        for sub in subs {
            sub.close().await;
        }
        self.inner.link.close().await;
    }

    /// Deletes queues by name (missing ones are fine), for tests and tools that made them.
    pub async fn delete_queues(&self, queues: &[String]) -> Result<()> {
        for q in queues {
            let ch = self.inner.link.channel().await?;
            let r = ch
                .queue_delete(
                    q.as_str().into(),
                    lapin::options::QueueDeleteOptions::default(),
                )
                .await;
            let _ = ch.close(200, "deleted".into()).await;
            match r {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(amqp_err(format!("deleting queue {q}"), e)),
            }
        }
        Ok(())
    }

    /// Publishes messages on a confirm channel of this call's own, all at once, then waits
    /// for every confirmation: one round trip for the lot. One result per message, in order.
    async fn publish(&self, messages: &[Outgoing]) -> Result<Vec<Published>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let mut ch = self.inner.link.publisher().await?;
        // Mandatory only with confirms: an unroutable message then comes back with one.
        // Without, nothing would read what comes back, and lapin would keep all of it.
        let opts = BasicPublishOptions {
            mandatory: self.inner.link.confirms(),
            ..BasicPublishOptions::default()
        };
        // Every publish puts its frames in order on its first poll, so the messages reach
        // the queue in the order given.
        let sends = messages.iter().map(|m| {
            ch.basic_publish(
                m.exchange.as_str().into(),
                m.routing_key.as_str().into(),
                opts,
                &m.payload,
                m.properties.clone(),
            )
        });
        let sent = join_all(sends).await;
        let mut confirms = Vec::with_capacity(sent.len());
        for s in sent {
            confirms.push(s.map_err(|e| amqp_err("publishing", e))?);
        }
        if !self.inner.link.confirms() {
            ch.settled();
            return Ok(messages.iter().map(|_| Published::Taken).collect());
        }
        let confirmed = join_all(confirms).await;
        ch.settled();
        let mut results = Vec::with_capacity(messages.len());
        let mut returned = Vec::new();
        for (c, m) in confirmed.into_iter().zip(messages) {
            results.push(match c {
                Ok(Confirmation::Ack(r)) => {
                    returned.extend(r);
                    Published::Taken
                }
                Ok(Confirmation::NotRequested) => Published::Taken,
                Ok(Confirmation::Nack(r)) => {
                    returned.extend(r);
                    Published::Failed(Error::broker_msg(format!(
                        "RabbitMQ refused the message for `{}` (publisher nack)",
                        m.routing_key
                    )))
                }
                Err(e) => Published::Failed(amqp_err("waiting for a publisher confirm", e)),
            });
        }
        // A message no queue took comes back with a confirm, but not always its own: lapin
        // hands it to the next confirm it completes, any of several under one `multiple`
        // ack. So each one is matched to the message it is: by message id, else by where it
        // went and its bytes.
        for ret in returned {
            let back = Returned {
                exchange: ret.exchange.as_str(),
                routing_key: ret.routing_key.as_str(),
                message_id: ret.properties.message_id().as_ref().map(|m| m.as_str()),
                data: &ret.data,
            };
            let Some(i) = back.which(messages, &results) else {
                // Not one of this call's: the channel is this call's alone, so this would
                // be a message published on it before (a broken invariant), not one lost.
                tracing::error!(routing_key = %ret.routing_key, exchange = %ret.exchange,
                    "a message came back unroutable that this publish did not send");
                continue;
            };
            let m = &messages[i];
            // Declared once but gone: the next use declares it again.
            self.inner.topology.forget(&m.routing_key);
            results[i] = Published::Unroutable(Error::broker_msg(format!(
                "no queue took the message for `{}` on exchange `{}`: the queue does not exist \
                 ({})",
                m.routing_key,
                m.exchange,
                if self.inner.topology.declares() {
                    "it was deleted; it is declared again before the next publish"
                } else {
                    "declare it, or connect with declare=true"
                }
            )));
        }
        Ok(results)
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
        let (sub, ready) = Subscription::start(
            self.inner.link.clone(),
            self.inner.topology.clone(),
            queue,
            self.inner.topology.kind(queue),
            window,
            self.inner.wake.clone(),
        )
        .await;
        // Kept even when its first attempt failed: it retries with backoff.
        self.inner.subs_map().insert(queue.to_owned(), sub);
        ready
    }

    /// The message count of `queue` (`None` when it does not exist).
    async fn message_count(&self, queue: &str) -> Result<Option<u64>> {
        let ch = self.inner.link.channel().await?;
        let opts = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let r = ch
            .queue_declare(queue.into(), opts, FieldTable::default())
            .await;
        match r {
            Ok(q) => {
                let _ = ch.close(200, "counted".into()).await;
                Ok(Some(q.message_count() as u64))
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(amqp_err(format!("counting queue {queue}"), e)),
        }
    }

    async fn purge_one(&self, queue: &str) -> Result<u64> {
        let ch = self.inner.link.channel().await?;
        let r = ch
            .queue_purge(queue.into(), QueuePurgeOptions::default())
            .await;
        match r {
            Ok(n) => {
                let _ = ch.close(200, "purged".into()).await;
                Ok(n as u64)
            }
            Err(e) if is_not_found(&e) => Ok(0),
            Err(e) => Err(amqp_err(format!("purging queue {queue}"), e)),
        }
    }

    /// Settles one subscription's deliveries: releases and rejects at once, retries and
    /// dead letters by a confirmed copy first, then every acknowledgement grouped.
    async fn settle_on(
        &self,
        sub: &Arc<Subscription>,
        items: Vec<(Settlement, u64)>,
        report: &mut SettleReport,
    ) -> Result<()> {
        let _serial = sub.settling.lock().await;
        let mut acks: Vec<(JobId, u64)> = Vec::new();
        let mut releases = Vec::new();
        let mut rejects = Vec::new();
        let mut copies: Vec<(JobId, u64, Outgoing, bool)> = Vec::new();
        let (channel, generation) = {
            let st = sub.state();
            (st.channel.clone(), st.generation)
        };
        let Some(channel) = channel else {
            report.fenced.extend(items.iter().map(|(s, _)| s.job));
            return Ok(());
        };
        let mut retry_targets = Vec::new();
        {
            let st = sub.state();
            for (s, tag) in items {
                let (gen_of, _) = wire::split_id(s.job);
                let Some(held) = st.unsettled.get(tag).filter(|_| gen_of == generation) else {
                    report.fenced.push(s.job);
                    continue;
                };
                match s.outcome {
                    Outcome::Ack | Outcome::Cancel => acks.push((s.job, tag)),
                    Outcome::Release => releases.push((s.job, tag)),
                    Outcome::Retry { delay, error } => {
                        retry_targets.push((
                            s.job,
                            tag,
                            delay,
                            error,
                            held.copy.to_job(&sub.queue),
                            held.message_id.clone(),
                        ));
                    }
                    Outcome::DeadLetter { error } => {
                        match self.inner.topology.dead_letter_target(&sub.queue) {
                            Some((exchange, routing_key)) => {
                                let job = held.copy.to_job(&sub.queue);
                                let props = wire::copy_properties(
                                    &job,
                                    held.message_id.as_deref(),
                                    None,
                                    &error,
                                );
                                let mut headers = props.headers().clone().unwrap_or_default();
                                headers.insert(
                                    wire::QUEUE.into(),
                                    lapin::types::AMQPValue::LongString(
                                        sub.queue.as_bytes().to_vec().into(),
                                    ),
                                );
                                let props = props.with_headers(headers);
                                copies.push((
                                    s.job,
                                    tag,
                                    Outgoing {
                                        exchange,
                                        routing_key,
                                        payload: job.payload,
                                        properties: props,
                                    },
                                    true,
                                ));
                            }
                            None => rejects.push((s.job, tag, error)),
                        }
                    }
                }
            }
        }
        // Retry copies wait in a retry queue (declared on first use), or go straight back.
        for (job_id, tag, delay, error, job, message_id) in retry_targets {
            let due = now_ms() + delay.as_millis() as i64;
            let (routing_key, run_at) = match retry_bucket(delay) {
                Some(ms) => (
                    self.inner
                        .topology
                        .ensure_retry(&self.inner.link, &sub.queue, ms)
                        .await?,
                    Some(due),
                ),
                None => (sub.queue.clone(), None),
            };
            let props = wire::copy_properties(&job, message_id.as_deref(), run_at, &error);
            copies.push((
                job_id,
                tag,
                Outgoing {
                    exchange: String::new(),
                    routing_key,
                    payload: job.payload,
                    properties: props,
                },
                false,
            ));
        }

        // Releases and rejects: one frame each, queued without waiting for their writes (see
        // `queue_frame`). The channel may have been replaced while retry copies were
        // published: its tags are then another channel's, and the frames below fail on the
        // closed one.
        {
            let mut st = sub.state();
            let same_channel = st.generation == generation;
            for (_, tag) in releases.iter().filter(|_| same_channel) {
                st.unsettled.remove(*tag);
            }
            for (_, tag, _) in rejects.iter().filter(|_| same_channel) {
                st.unsettled.remove(*tag);
            }
        }
        for (id, tag) in &releases {
            let requeue = BasicNackOptions {
                multiple: false,
                requeue: true,
            };
            match queue_frame(channel.basic_nack(*tag, requeue)) {
                Ok(()) => report.applied += 1,
                Err(_) => report.fenced.push(*id),
            }
        }
        for (id, tag, error) in &rejects {
            tracing::error!(queue = %sub.queue, job = %id, %error,
                "dead letter rejected without requeue: the queue's own dead-letter policy decides \
                 where it goes, and this error is not kept with it (configure a dead-letter \
                 exchange, or declare topology, to keep it)");
            match queue_frame(channel.basic_reject(*tag, BasicRejectOptions { requeue: false })) {
                Ok(()) => report.applied += 1,
                Err(_) => report.fenced.push(*id),
            }
        }

        // Copies: confirmed before their originals are acknowledged.
        let mut failed = None;
        if !copies.is_empty() {
            // The `.dead` queue Hopper declares, when a copy that comes back unroutable may
            // wait for the settlement's retry: only if the queue was taken for declared
            // here, so the retry declares it first. Declared just now, or not declarable,
            // an unroutable copy is rejected at once, as without topology.
            let mut own_dead = None;
            if self.inner.topology.declares() && copies.iter().any(|c| c.3) {
                let known = self.inner.topology.is_declared(&sub.queue);
                match self
                    .inner
                    .topology
                    .ensure_queue(&self.inner.link, &sub.queue)
                    .await
                {
                    Ok(()) if known => own_dead = Some(dead_queue(&sub.queue)),
                    Ok(()) => {}
                    Err(e) => tracing::error!(queue = %sub.queue, error = %e.chain(),
                        "cannot declare the queue and its dead-letter queue again"),
                }
            }
            let (meta, outgoing): (Vec<_>, Vec<_>) = copies
                .into_iter()
                .map(|(id, tag, o, dead)| {
                    let to_own = dead
                        && o.exchange.is_empty()
                        && own_dead.as_deref() == Some(o.routing_key.as_str());
                    ((id, tag, dead, to_own), o)
                })
                .unzip();
            let results = self.publish(&outgoing).await?;
            for ((id, tag, dead, to_own), r) in meta.into_iter().zip(results) {
                // A copy to the `.dead` queue Hopper declares, which was deleted: kept for
                // the settlement's retry, by which the queue is declared again. Rejected,
                // the message would follow the queue's dead-letter route to that same
                // missing queue and be dropped.
                let retry_later = to_own && matches!(r, Published::Unroutable(_));
                match r.into_result() {
                    Ok(()) => acks.push((id, tag)),
                    Err(e) if dead && !retry_later => {
                        tracing::error!(queue = %sub.queue, job = %id, error = %e.chain(),
                            "dead-letter copy refused; rejecting the message instead");
                        // Only on the channel the batch was read against: after a
                        // reconnect the same tag names the new channel's delivery.
                        {
                            let mut st = sub.state();
                            if st.generation == generation {
                                st.unsettled.remove(tag);
                            }
                        }
                        match channel
                            .basic_reject(tag, BasicRejectOptions { requeue: false })
                            .await
                        {
                            Ok(()) => report.applied += 1,
                            Err(_) => report.fenced.push(id),
                        }
                    }
                    Err(e) => failed = Some(e),
                }
            }
        }

        // Acknowledgements (see `acks`): those below the lowest delivery still unsettled
        // go in one `multiple` frame; those above it are held until it settles, so a
        // delivery whose handler has not finished is never covered. Held acks count as
        // applied: the frame that carries them is this channel's to send.
        // Only on the channel the batch was read against: after a reconnect (possible while
        // copies were published) the same tags name the new channel's deliveries.
        let tags: Vec<u64> = acks.iter().map(|&(_, tag)| tag).collect();
        let frames = {
            let mut st = sub.state();
            (st.generation == generation).then(|| st.plan_acks(&tags, false))
        };
        match frames {
            Some(frames) if send_acks(&channel, &frames).is_ok() => {
                report.applied += acks.len();
            }
            _ => report.fenced.extend(acks.iter().map(|&(id, _)| id)),
        }
        sub.send_held_acks_when_due();
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Broker for AmqpBroker {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "amqp",
            durable: true,
            in_process: false,
            delayed: true,
            priorities: false,
            leases: false,
            topics: false,
            pushed: true,
        }
    }

    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        for job in &jobs {
            job.validate()?;
        }
        let mut queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        for q in queues {
            self.inner
                .topology
                .ensure_queue(&self.inner.link, q)
                .await?;
        }
        let now = now_ms();
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
        Ok(ids)
    }

    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
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

    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        let mut report = SettleReport::default();
        let mut by_generation: BTreeMap<u64, Vec<(Settlement, u64)>> = BTreeMap::new();
        for s in settlements {
            let (generation, tag) = wire::split_id(s.job);
            by_generation.entry(generation).or_default().push((s, tag));
        }
        let mut failed = None;
        for (generation, items) in by_generation {
            match self.inner.sub_of_generation(generation) {
                Some(sub) => {
                    if let Err(e) = self.settle_on(&sub, items, &mut report).await {
                        failed = Some(e);
                    }
                }
                None => report.fenced.extend(items.iter().map(|(s, _)| s.job)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(report),
        }
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
        validate_queue_name(queue)?;
        // Declared first when topology is on, so the count never trips on a missing queue.
        self.inner
            .topology
            .ensure_queue(&self.inner.link, queue)
            .await?;
        let pending = self.message_count(queue).await?.unwrap_or(0);
        let mut scheduled = 0;
        for rq in self.inner.topology.retry_queues_of(queue) {
            scheduled += self.message_count(&rq).await?.unwrap_or(0);
        }
        let dead = match self.inner.topology.dead_letter_target(queue) {
            Some((ex, key)) if ex.is_empty() && key == dead_queue(queue) => {
                self.message_count(&key).await?.unwrap_or(0)
            }
            _ => 0,
        };
        let leased = self
            .inner
            .sub(queue)
            .map_or(0, |s| s.state().unsettled.len() as u64);
        Ok(QueueCounts {
            pending,
            scheduled,
            leased,
            dead,
        })
    }

    async fn dead_letters(&self, _queue: &str, _limit: usize) -> Result<Vec<JobRecord>> {
        Err(Error::NotSupported {
            broker: "amqp",
            what: "listing dead letters (read the dead-letter queue with any AMQP client)",
        })
    }

    async fn purge(&self, queue: &str) -> Result<u64> {
        validate_queue_name(queue)?;
        self.inner
            .topology
            .ensure_queue(&self.inner.link, queue)
            .await?;
        let mut n = self.purge_one(queue).await?;
        for rq in self.inner.topology.retry_queues_of(queue) {
            n += self.purge_one(&rq).await?;
        }
        if let Some((ex, key)) = self.inner.topology.dead_letter_target(queue) {
            if ex.is_empty() && key == dead_queue(queue) {
                n += self.purge_one(&key).await?;
            }
        }
        Ok(n)
    }

    async fn subscribe(&self, queue: &str, window: Option<u32>) -> Result<()> {
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

    async fn unsubscribe(&self, queue: &str) -> Result<()> {
        let sub = self.inner.subs_map().remove(queue);
        if let Some(sub) = sub {
            sub.close().await;
        }
        Ok(())
    }

    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.wake.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(queue: &str, id: Option<&str>, payload: &[u8]) -> Outgoing {
        let props = BasicProperties::default();
        Outgoing {
            exchange: String::new(),
            routing_key: queue.to_owned(),
            payload: payload.to_vec(),
            properties: match id {
                Some(id) => props.with_message_id(id.into()),
                None => props,
            },
        }
    }

    fn returned<'a>(queue: &'a str, id: Option<&'a str>, data: &'a [u8]) -> Returned<'a> {
        Returned {
            exchange: "",
            routing_key: queue,
            message_id: id,
            data,
        }
    }

    /// lapin hands a returned message to whichever confirm completes next: the message it
    /// is, not the confirm it came with, decides which result turns unroutable.
    #[test]
    fn a_returned_message_is_matched_by_its_id_then_by_route_and_bytes() {
        let messages = [
            outgoing("a", Some("1"), b"x"),
            outgoing("gone", Some("2"), b"x"),
            outgoing("gone", None, b"y"),
            outgoing("gone", None, b"y"),
            outgoing("a", Some("2"), b"x"),
        ];
        let mut results: Vec<Published> = (0..5).map(|_| Published::Taken).collect();
        assert_eq!(
            returned("gone", Some("2"), b"x").which(&messages, &results),
            Some(1)
        );
        assert_eq!(
            returned("a", Some("2"), b"x").which(&messages, &results),
            Some(4),
            "copies keep their delivery's id: the route tells them apart"
        );
        assert_eq!(
            returned("gone", Some("9"), b"x").which(&messages, &results),
            None,
            "an id of another publish matches none of these"
        );
        // Without ids, equal messages are matched in turn, each once.
        assert_eq!(
            returned("gone", None, b"y").which(&messages, &results),
            Some(2)
        );
        results[2] = Published::Unroutable(Error::broker_msg("gone"));
        assert_eq!(
            returned("gone", None, b"y").which(&messages, &results),
            Some(3)
        );
        results[3] = Published::Unroutable(Error::broker_msg("gone"));
        assert_eq!(
            returned("gone", None, b"y").which(&messages, &results),
            None
        );
        assert_eq!(
            returned("a", None, b"x").which(&messages, &results),
            None,
            "a message with an id is matched by it, not by its bytes"
        );
    }
}
