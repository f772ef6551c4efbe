//! One subscription: a channel of its own with one consumer on it, and a task that moves
//! the server's pushes into a local buffer that [`fetch`](hopper_core::Broker::fetch) takes
//! from.
//!
//! Each channel the subscription opens gets a new *generation* from a process-wide counter.
//! A delivery's id carries its generation and delivery tag ([`wire::delivery_id`]), so a
//! settlement finds its channel, and one naming a channel that is gone (the connection was
//! lost, or the subscription closed) is fenced: the server has already put that delivery
//! back, and its tag means nothing on the next channel.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use hopper_core::{Job, JobCopy, Result};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use tokio::sync::{mpsc, oneshot, watch};

use crate::acks::{AckFrames, HeldAcks, hold_limit};
use crate::conn::{SharedLink, amqp_err, is_not_found};
use crate::options::QueueKind;
use crate::topology::Topology;
use crate::unsettled::{Held, Unsettled};
use crate::wire;

/// Channel generations of this process; 0 is never used, so it can mean "none".
static GENERATION: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
pub(crate) struct SubState {
    /// The generation of the open channel (or of the last one, once lost).
    pub(crate) generation: u64,
    /// The open channel; `None` while reconnecting or once closed.
    pub(crate) channel: Option<Channel>,
    /// Deliveries not taken by a fetch yet.
    pub(crate) buffer: VecDeque<Job>,
    /// Every delivery of the open channel not settled yet, buffered or taken, by tag.
    pub(crate) unsettled: Unsettled,
    /// The window the consumer runs under (`None`: no `basic.qos`).
    pub(crate) window: Option<u16>,
    /// Acks of the open channel settled here and not sent yet (see [`crate::acks`]).
    pub(crate) held_acks: HeldAcks,
    /// A task is waiting to send the held acks once they are due.
    pub(crate) held_acks_timer: bool,
}

impl SubState {
    /// Removes `acked` from the unsettled deliveries and says which ack frames to send now
    /// (every held one when `flush`); the rest stay held.
    pub(crate) fn plan_acks(&mut self, acked: &[u64], flush: bool) -> AckFrames {
        for &tag in acked {
            self.unsettled.remove(tag);
        }
        let low = self.unsettled.lowest().unwrap_or(u64::MAX);
        let limit = hold_limit(self.window);
        self.held_acks
            .plan(acked.iter().copied(), low, limit, Instant::now(), flush)
    }
}

enum Cmd {
    Window(Option<u16>, oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<()>),
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) queue: String,
    kind: QueueKind,
    /// Declares the queue again before a consumer is reopened on it, if it was deleted.
    topology: Arc<Topology>,
    state: Mutex<SubState>,
    /// Held while a settlement batch of this subscription is worked out and sent, so two
    /// batches never interleave: an ack with `multiple` covers every earlier tag the
    /// server still holds, and a concurrent batch's acknowledgement of one of those would
    /// then name a tag already gone, which closes the channel.
    pub(crate) settling: tokio::sync::Mutex<()>,
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl Subscription {
    /// Starts a subscription task and waits until its consumer runs (or its first attempt
    /// failed: the task keeps retrying with backoff).
    pub(crate) async fn start(
        link: SharedLink,
        topology: Arc<Topology>,
        queue: &str,
        kind: QueueKind,
        window: Option<u16>,
        wake: watch::Sender<u64>,
    ) -> (Arc<Subscription>, Result<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let sub = Arc::new(Subscription {
            queue: queue.to_owned(),
            kind,
            topology,
            state: Mutex::new(SubState {
                window,
                held_acks: HeldAcks::new(link.ack_hold),
                ..SubState::default()
            }),
            settling: tokio::sync::Mutex::new(()),
            cmds: tx,
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(run(sub.clone(), link, wake, rx, Some(ready_tx)));
        let ready = ready_rx
            .await
            .unwrap_or(Err(hopper_core::Error::Closed("subscription")));
        (sub, ready)
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, SubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-sizes the window: the consumer is cancelled and started again under the new one.
    pub(crate) async fn set_window(&self, window: Option<u16>) -> Result<()> {
        if self.state().window == window {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Window(window, tx)).is_err() {
            return Err(hopper_core::Error::Closed("subscription"));
        }
        rx.await
            .unwrap_or(Err(hopper_core::Error::Closed("subscription")))
    }

    /// Closes the channel: the server requeues what it held unsettled, marked redelivered.
    pub(crate) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Takes up to `limit` buffered deliveries.
    pub(crate) fn take(&self, limit: usize) -> Vec<Job> {
        let mut st = self.state();
        let n = limit.min(st.buffer.len());
        st.buffer.drain(..n).collect()
    }

    fn push(&self, delivery: Delivery, generation: u64, wake: &watch::Sender<u64>) {
        self.push_all(vec![delivery], generation, wake);
    }

    /// Buffers `deliveries` of channel `generation` under one lock, and wakes the worker
    /// once.
    fn push_all(&self, deliveries: Vec<Delivery>, generation: u64, wake: &watch::Sender<u64>) {
        let at = now_ms();
        let decoded: Vec<(u64, Job, Held)> = deliveries
            .into_iter()
            .map(|delivery| {
                let tag = delivery.delivery_tag;
                let message_id = delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|m| m.as_str().to_owned());
                let job = wire::decode(delivery, &self.queue, generation, self.kind, at);
                let held = Held {
                    copy: JobCopy::new(&job),
                    message_id,
                };
                (tag, job, held)
            })
            .collect();
        {
            let mut st = self.state();
            if st.generation != generation {
                return; // stragglers of a channel already replaced
            }
            for (tag, job, held) in decoded {
                st.buffer.push_back(job);
                st.unsettled.insert(tag, held);
            }
        }
        wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Sends the held acks and closes the channel, with no settlement batch in between
    /// (one arriving later finds the channel gone and is fenced), then forgets it.
    async fn close_channel(&self, channel: &Channel, why: &str) {
        let _serial = self.settling.lock().await;
        self.send_held_acks_serialized(true).await;
        let _ = channel.close(200, why.into()).await;
        self.lose();
    }

    /// Forgets the channel: its deliveries are the server's again.
    fn lose(&self) {
        let mut st = self.state();
        st.channel = None;
        st.buffer.clear();
        st.unsettled.clear();
        st.held_acks.clear();
    }

    /// Makes sure held acks go out once due: starts the task that sends them, unless there
    /// are none or one is waiting already.
    pub(crate) fn send_held_acks_when_due(self: &Arc<Self>) {
        {
            let mut st = self.state();
            if st.held_acks.is_empty() || st.held_acks_timer {
                return;
            }
            st.held_acks_timer = true;
        }
        let sub = self.clone();
        tokio::spawn(async move {
            loop {
                let due = {
                    let mut st = sub.state();
                    let due = st.held_acks.due();
                    st.held_acks_timer = due.is_some();
                    due
                };
                let Some(due) = due else { return };
                tokio::time::sleep_until(due.into()).await;
                sub.send_held_acks(false).await;
            }
        });
    }

    /// Sends the held acks that are due, or every one with `all`, after any settlement
    /// batch in progress. A send that fails leaves those deliveries to the server, which
    /// puts them back once the channel closes.
    pub(crate) async fn send_held_acks(&self, all: bool) {
        let _serial = self.settling.lock().await;
        self.send_held_acks_serialized(all).await;
    }

    /// [`send_held_acks`](Self::send_held_acks) for a caller already holding `settling`.
    async fn send_held_acks_serialized(&self, all: bool) {
        let (channel, frames) = {
            let mut st = self.state();
            (st.channel.clone(), st.plan_acks(&[], all))
        };
        if let Some(channel) = channel {
            if send_acks(&channel, &frames).is_err() {
                tracing::warn!(queue = %self.queue, "held acks not sent: the channel closed; the server redelivers those jobs");
            }
        }
    }
}

/// Queues `frames` on `channel`, in order, without waiting for lapin's I/O thread to write
/// them (see [`queue_frame`]), so a settlement does not cost a wake-up of the I/O thread and
/// another of the settling task before the next can go. Frames go out in the order they
/// were queued, which is all the grouping needs (see [`crate::acks`]).
///
/// Then this thread yields its core (`sched_yield`): the I/O thread, just woken to write
/// the acks, may be waiting for this very core, and until the server reads an ack it
/// pushes nothing into the window that ack frees. Where the I/O thread runs elsewhere, the
/// yield returns at once. On a 2-core host at a window of 10, where every fifth delivery
/// sends an ack, a worker drained 34.4k msgs/s with it against 28.5k without (medians of
/// 14 interleaved rounds; BENCHMARKS.md, the thirteenth session).
pub(crate) fn send_acks(channel: &Channel, frames: &AckFrames) -> lapin::Result<()> {
    if frames.is_empty() {
        return Ok(());
    }
    for (tag, multiple) in frames.frames() {
        queue_frame(channel.basic_ack(tag, BasicAckOptions { multiple }))?;
    }
    std::thread::yield_now();
    Ok(())
}

/// Polls a lapin call that sends one frame (an ack, a nack, a reject) once: its frame is
/// queued then, after those queued before it, and the rest of the call only waits for the
/// write, which is left out. A frame that is queued but never written means the channel or
/// the connection was lost, and the server puts the delivery back: it runs again, as after
/// any lost acknowledgement, and a release or a reject is then what the server does anyway.
/// So an error here, and the "held acks not sent" warning, means a channel already known to
/// be closed; and a settlement never waits on a server gone silent.
pub(crate) fn queue_frame(call: impl Future<Output = lapin::Result<()>>) -> lapin::Result<()> {
    let call = std::pin::pin!(call);
    match call.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Err(e)) => Err(e),
        Poll::Ready(Ok(())) | Poll::Pending => Ok(()),
    }
}

fn now_ms() -> i64 {
    hopper_core::job::to_millis(std::time::SystemTime::now())
}

fn consume_options() -> BasicConsumeOptions {
    BasicConsumeOptions::default()
}

async fn open(
    sub: &Subscription,
    link: &SharedLink,
    seq: &mut u64,
) -> Result<(Channel, Consumer, u64)> {
    // A no-op unless topology is on and the queue was found deleted (see `consume`).
    sub.topology.ensure_queue(link, &sub.queue).await?;
    let conn = link.connection().await?;
    let channel = conn
        .create_channel()
        .await
        .map_err(|e| amqp_err("opening a consumer channel", e))?;
    let window = sub.state().window;
    if let Some(w) = window {
        channel
            .basic_qos(w, BasicQosOptions::default())
            .await
            .map_err(|e| amqp_err(format!("basic.qos {w} for queue {}", sub.queue), e))?;
    }
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    {
        let mut st = sub.state();
        st.generation = generation;
        st.channel = Some(channel.clone());
        st.buffer.clear();
        st.unsettled.clear();
        st.held_acks.clear();
    }
    let consumer = consume(sub, &channel, generation, seq).await?;
    Ok((channel, consumer, generation))
}

/// Cancels the consumer, keeps what it delivered before the cancel took effect (those
/// deliveries stay unsettled on this channel, so nothing is lost), and consumes again under
/// the new window. The window counts each consumer's own unsettled deliveries, so right
/// after a change the earlier consumer's ones are held on top of the new window until they
/// are settled: a brief overshoot of at most the old window.
async fn rewindow(
    sub: &Subscription,
    channel: &Channel,
    consumer: &mut Consumer,
    window: Option<u16>,
    generation: u64,
    wake: &watch::Sender<u64>,
    seq: &mut u64,
) -> Result<()> {
    channel
        .basic_cancel(consumer.tag(), BasicCancelOptions::default())
        .await
        .map_err(|e| amqp_err("basic.cancel", e))?;
    let drain = async {
        while let Some(Ok(d)) = consumer.next().await {
            sub.push(d, generation, wake);
        }
    };
    // Deliveries the cancelled consumer still held and this never read would stay
    // unsettled on the channel without being known here, so a later `multiple` ack could
    // cover them: rather than that, the channel is closed (the caller reopens it) and the
    // server puts them back.
    if tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        return Err(hopper_core::Error::broker_msg(format!(
            "queue {}: the consumer did not end within 5 s of its basic.cancel",
            sub.queue
        )));
    }
    channel
        .basic_qos(window.unwrap_or(0), BasicQosOptions::default())
        .await
        .map_err(|e| amqp_err("basic.qos", e))?;
    *consumer = consume(sub, channel, generation, seq).await?;
    sub.state().window = window;
    Ok(())
}

/// Starts a consumer on `channel` under a tag unique to this channel generation.
async fn consume(
    sub: &Subscription,
    channel: &Channel,
    generation: u64,
    seq: &mut u64,
) -> Result<Consumer> {
    *seq += 1;
    channel
        .basic_consume(
            sub.queue.as_str().into(),
            format!("hopper-{generation}-{seq}").into(),
            consume_options(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| {
            if is_not_found(&e) {
                // Deleted (the server cancels a consumer whose queue is deleted): with
                // topology on, the next attempt declares it again.
                sub.topology.forget(&sub.queue);
            }
            amqp_err(format!("consuming from queue {}", sub.queue), e)
        })
}

/// Most deliveries taken in one push (see [`ready_deliveries`]).
const PUSH_MAX: usize = 256;

/// `first` and the deliveries `consumer` already holds after it, up to [`PUSH_MAX`], without
/// waiting; and how the stream ended if it did meanwhile (`Ok` for ended by the server).
fn ready_deliveries(
    consumer: &mut Consumer,
    first: Delivery,
) -> (Vec<Delivery>, Option<lapin::Result<()>>) {
    let mut ready = vec![first];
    while ready.len() < PUSH_MAX {
        match consumer.next().now_or_never() {
            Some(Some(Ok(d))) => ready.push(d),
            Some(Some(Err(e))) => return (ready, Some(Err(e))),
            Some(None) => return (ready, Some(Ok(()))),
            None => break,
        }
    }
    (ready, None)
}

/// The subscription task: open, move deliveries into the buffer, obey commands; after a
/// loss, reopen with backoff under the same window (a new generation).
async fn run(
    sub: Arc<Subscription>,
    link: SharedLink,
    wake: watch::Sender<u64>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    mut ready: Option<oneshot::Sender<Result<()>>>,
) {
    let (min, max) = link.backoff;
    let mut wait = min;
    let mut seq = 0u64;
    loop {
        match open(&sub, &link, &mut seq).await {
            Ok((channel, mut consumer, generation)) => {
                wait = min;
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Ok(()));
                }
                loop {
                    tokio::select! {
                        d = consumer.next() => {
                            let end = match d {
                                Some(Ok(d)) => {
                                    // What else already arrived goes in the same push: one
                                    // lock and one wake-up of the worker for all of it.
                                    let (ready, end) = ready_deliveries(&mut consumer, d);
                                    sub.push_all(ready, generation, &wake);
                                    end
                                }
                                Some(Err(e)) => Some(Err(e)),
                                None => Some(Ok(())),
                            };
                            match end {
                                None => {}
                                Some(Err(e)) => {
                                    tracing::warn!(queue = %sub.queue, error = %e, "subscription lost; reopening");
                                    break;
                                }
                                Some(Ok(())) => {
                                    tracing::warn!(queue = %sub.queue, "consumer ended by the server; reopening");
                                    break;
                                }
                            }
                        }
                        cmd = cmds.recv() => match cmd {
                            Some(Cmd::Window(w, reply)) => {
                                let r = rewindow(&sub, &channel, &mut consumer, w, generation, &wake, &mut seq).await;
                                let failed = r.is_err();
                                if failed {
                                    // Reopen under the new window: the old channel is gone.
                                    sub.state().window = w;
                                }
                                let _ = reply.send(r);
                                if failed {
                                    break;
                                }
                            }
                            Some(Cmd::Close(reply)) => {
                                sub.close_channel(&channel, "unsubscribed").await;
                                let _ = reply.send(());
                                return;
                            }
                            None => {
                                sub.close_channel(&channel, "broker dropped").await;
                                return;
                            }
                        }
                    }
                }
                // The consumer may have ended with the channel still open (cancelled by the
                // server, or a failed re-window): its held acks go out before it closes.
                sub.close_channel(&channel, "reopening").await;
                wake.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(e) => {
                sub.lose();
                tracing::warn!(queue = %sub.queue, error = %e.chain(), retry_in = ?wait, "cannot subscribe");
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Err(e));
                }
                if link.closed.load(Ordering::Acquire) {
                    return;
                }
            }
        }
        // Wait before reopening, still answering commands.
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                cmd = cmds.recv() => match cmd {
                    Some(Cmd::Window(w, reply)) => {
                        sub.state().window = w;
                        let _ = reply.send(Ok(()));
                    }
                    Some(Cmd::Close(reply)) => {
                        let _ = reply.send(());
                        return;
                    }
                    None => return,
                }
            }
        }
        wait = (wait * 2).min(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
    use lapin::{BasicProperties, Connection, ConnectionProperties};

    async fn publish(ch: &Channel, queue: &str, i: u32) {
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &i.to_be_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }

    fn number(d: &Delivery) -> u32 {
        u32::from_be_bytes(d.data[..4].try_into().unwrap())
    }

    /// Against the real server: 500 deliveries that all arrived are taken 256 then 244, in
    /// order; a take that ended because nothing more had arrived still wakes for the next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deliveries_that_arrived_together_are_taken_together() {
        let conn = Connection::connect(
            &hopper_testkit::helpers::amqp_url(),
            ConnectionProperties::default(),
        )
        .await
        .expect("RabbitMQ at HOPPER_TEST_AMQP_URL or 127.0.0.1:5672");
        let ch = conn.create_channel().await.unwrap();
        // Server-named and exclusive: this test's own, gone with its connection.
        let queue = ch
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        let name = queue.name().as_str();
        for i in 0..500 {
            publish(&ch, name, i).await;
        }
        ch.basic_qos(500, BasicQosOptions::default()).await.unwrap();
        let mut consumer = ch
            .basic_consume(
                name.into(),
                "push-test".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        // Nothing polls the consumer until the queue has handed every message to the
        // consumer's channel ...
        let probe = conn.create_channel().await.unwrap();
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let mut ready = u32::MAX;
        for _ in 0..1200 {
            let q = probe
                .queue_declare(name.into(), passive, FieldTable::default())
                .await
                .unwrap();
            ready = q.message_count();
            if ready == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(ready, 0, "the server pushed every message within 30 s");
        // ... and until a reply on that channel came back: the server sends it after the
        // deliveries it already held, and lapin hands each delivery to the consumer before
        // it completes the reply.
        ch.basic_qos(500, BasicQosOptions::default()).await.unwrap();

        let (mut sizes, mut order, mut last_tag) = (Vec::new(), Vec::new(), 0);
        while order.len() < 500 {
            let first = consumer.next().await.expect("open").expect("a delivery");
            let (ready, end) = ready_deliveries(&mut consumer, first);
            assert!(end.is_none(), "the consumer is still running");
            sizes.push(ready.len());
            order.extend(ready.iter().map(number));
            last_tag = ready.last().map_or(last_tag, |d| d.delivery_tag);
        }
        assert_eq!(sizes, vec![PUSH_MAX, 500 - PUSH_MAX]);
        assert_eq!(order, (0..500).collect::<Vec<_>>(), "in delivery order");

        // The last take stopped at an empty consumer, polled without a waker of its own;
        // the next delivery must still wake the consumer's next poll. (The window is full
        // until the 500 are acknowledged.)
        ch.basic_ack(last_tag, BasicAckOptions { multiple: true })
            .await
            .unwrap();
        publish(&ch, name, 500).await;
        let next = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .expect("the delivery after a take that ran dry arrives")
            .expect("open")
            .expect("a delivery");
        assert_eq!(number(&next), 500);
        let _ = conn.close(200, "done".into()).await;
    }
}
