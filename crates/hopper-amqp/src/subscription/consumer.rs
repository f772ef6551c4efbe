//! A subscription's channel and consumer: each channel opened under a new generation and
//! window, the consumer started on it, and re-started under a new window.

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

/// Channel generations of this process; 0 is never used, so it can mean "none".
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn consume_options() -> BasicConsumeOptions {
    BasicConsumeOptions::default()
}

pub(super) async fn open(
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
pub(super) async fn rewindow(
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
