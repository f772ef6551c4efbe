//! A subscription's channel and consumer: each channel opened under a new generation and
//! window, the consumer started on it (unless the queue is paused), re-started under a new
//! window, cancelled by a pause and started again by a resume.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use hopper_core::Result;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use tokio::sync::watch;

use super::Subscription;
use crate::conn::{SharedLink, amqp_err, is_not_found};
use crate::control::{Signals, is_paused};

/// Channel generations of this process; 0 is never used, so it can mean "none".
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn consume_options() -> BasicConsumeOptions {
    BasicConsumeOptions::default()
}

/// Opens the channel under a new generation and its window, and consumes on it unless the
/// queue is paused (then `None`: nothing arrives until a resume).
pub(super) async fn open(
    sub: &Subscription,
    link: &SharedLink,
    seq: &mut u64,
    signals: &mut Signals,
) -> Result<(Channel, Option<Consumer>, u64)> {
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
    // Emptied before the flag is read: an announcement from here on makes the task read it
    // again, so a pause between the read and the consume is not missed.
    while signals.try_recv().is_ok() {}
    let consumer = if is_paused(link, &sub.queue).await? {
        tracing::info!(queue = %sub.queue, "queue paused: not consuming until it is resumed");
        None
    } else {
        Some(consume(sub, &channel, generation, seq).await?)
    };
    Ok((channel, consumer, generation))
}

/// Pauses: cancels the consumer, keeping what it delivered before the cancel took effect
/// (those deliveries may still be fetched and run: pausing stops taking, it does not take
/// back).
pub(super) async fn pause(
    sub: &Subscription,
    channel: &Channel,
    consumer: &mut Option<Consumer>,
    generation: u64,
    wake: &watch::Sender<u64>,
) -> Result<()> {
    if let Some(mut running) = consumer.take() {
        cancel(sub, channel, &mut running, generation, wake).await?;
        tracing::info!(queue = %sub.queue, "queue paused: consumer cancelled");
    }
    Ok(())
}

/// Resumes: consumes again on the same channel, under the window set on it.
pub(super) async fn resume(
    sub: &Subscription,
    channel: &Channel,
    consumer: &mut Option<Consumer>,
    generation: u64,
    seq: &mut u64,
) -> Result<()> {
    if consumer.is_none() {
        *consumer = Some(consume(sub, channel, generation, seq).await?);
        tracing::info!(queue = %sub.queue, "queue resumed: consuming again");
    }
    Ok(())
}

/// Cancels the consumer, keeps what it delivered before the cancel took effect (those
/// deliveries stay unsettled on this channel, so nothing is lost), and consumes again under
/// the new window. The window counts each consumer's own unsettled deliveries, so right
/// after a change the earlier consumer's ones are held on top of the new window until they
/// are settled: a brief overshoot of at most the old window. A paused subscription only
/// takes the new window, for its resume.
pub(super) async fn rewindow(
    sub: &Subscription,
    channel: &Channel,
    consumer: &mut Option<Consumer>,
    window: Option<u16>,
    generation: u64,
    wake: &watch::Sender<u64>,
    seq: &mut u64,
) -> Result<()> {
    let running = consumer.is_some();
    if let Some(c) = consumer.as_mut() {
        cancel(sub, channel, c, generation, wake).await?;
    }
    *consumer = None;
    channel
        .basic_qos(window.unwrap_or(0), BasicQosOptions::default())
        .await
        .map_err(|e| amqp_err("basic.qos", e))?;
    if running {
        *consumer = Some(consume(sub, channel, generation, seq).await?);
    }
    sub.state().window = window;
    Ok(())
}

/// Cancels `consumer` and moves what it still delivers into the buffer, until it ends.
async fn cancel(
    sub: &Subscription,
    channel: &Channel,
    consumer: &mut Consumer,
    generation: u64,
    wake: &watch::Sender<u64>,
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
