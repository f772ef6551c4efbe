//! Pausing a queue for every worker on a virtual host, with nothing but AMQP.
//!
//! The truth is a flag: the empty durable queue [`paused_queue`] exists while the queue is
//! paused. A subscription looks at it (a passive declare) before it consumes, so a worker
//! that starts, or reconnects, while the queue is paused takes nothing.
//!
//! Running workers are told at once: each pause or resume is announced on the fanout
//! exchange [`CONTROL_EXCHANGE`], and every broker with subscriptions listens to it through
//! an exclusive, auto-deleted queue of its own. An announcement only says *look again*:
//! the subscription reads the flag before it cancels its consumer or consumes again, so
//! two operators racing each other leave every worker with the flag's final state, not
//! with whichever announcement came last. One missed while the listener was not bound
//! (it was starting, or its connection was lost) is made up for when it binds: every
//! subscription then looks at its flag again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use hopper_core::Result;
use hopper_core::job::validate_queue_name;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Consumer, ExchangeKind};
use tokio::sync::{mpsc, oneshot};

use crate::conn::{Link, SharedLink, amqp_err};
use crate::topology::{CONTROL_EXCHANGE, depth, paused_queue};

/// The message `type` of an announcement that a queue was paused; its body is the queue.
pub const PAUSE: &str = "hopper.pause";
/// The message `type` of an announcement that a queue was resumed; its body is the queue.
pub const RESUME: &str = "hopper.resume";

/// Whether `queue` is paused: whether its flag queue exists.
pub(crate) async fn is_paused(link: &Link, queue: &str) -> Result<bool> {
    Ok(depth(link, &paused_queue(queue)).await?.is_some())
}

/// Creates or deletes `queue`'s flag; whether that changed it. Two operators doing the
/// same at the same moment may both be told it did.
pub(crate) async fn set_flag(link: &Link, queue: &str, paused: bool) -> Result<bool> {
    if is_paused(link, queue).await? == paused {
        return Ok(false);
    }
    let flag = paused_queue(queue);
    let ch = link.channel().await?;
    let r = if paused {
        let opts = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare(flag.as_str().into(), opts, FieldTable::default())
            .await
            .map(drop)
    } else {
        ch.queue_delete(flag.as_str().into(), QueueDeleteOptions::default())
            .await
            .map(drop)
    };
    let _ = ch.close(200, "pause flag set".into()).await;
    r.map_err(|e| amqp_err(format!("setting the pause flag {flag}"), e))?;
    Ok(true)
}

async fn declare_exchange(ch: &Channel) -> Result<()> {
    let opts = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(
        CONTROL_EXCHANGE.into(),
        ExchangeKind::Fanout,
        opts,
        FieldTable::default(),
    )
    .await
    .map_err(|e| amqp_err(format!("declaring the exchange {CONTROL_EXCHANGE}"), e))
}

/// Tells every listening broker that `queue` was paused or resumed. Returns once the server
/// has routed the announcement: it answers the channel's close after everything sent on it.
pub(crate) async fn announce(link: &Link, queue: &str, paused: bool) -> Result<()> {
    let ch = link.channel().await?;
    let sent: Result<()> = async {
        declare_exchange(&ch).await?;
        let kind = if paused { PAUSE } else { RESUME };
        ch.basic_publish(
            CONTROL_EXCHANGE.into(),
            queue.into(),
            BasicPublishOptions::default(),
            queue.as_bytes(),
            BasicProperties::default().with_type(kind.into()),
        )
        .await
        .map_err(|e| amqp_err("announcing a pause", e))?;
        Ok(())
    }
    .await;
    let closed = ch.close(200, "announced".into()).await;
    sent?;
    closed.map_err(|e| amqp_err("announcing a pause", e))
}

/// What a subscription hears of its queue's pause: each message says *read the flag again*,
/// carrying what the announcement said (`None` after the listener bound again), for when
/// the flag cannot be read. A channel rather than a `watch`: the subscription task polls it
/// on every turn of its delivery loop, and an empty channel costs an atomic load there.
pub(crate) type Signals = mpsc::UnboundedReceiver<Option<bool>>;

/// The subscriptions of one broker waiting to hear of their queue's pause.
#[derive(Debug, Default)]
pub(crate) struct PauseSignals {
    queues: Mutex<HashMap<String, mpsc::UnboundedSender<Option<bool>>>>,
}

impl PauseSignals {
    fn map(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<Option<bool>>>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `queue`'s subscription listens to. Taken before the subscription opens, so an
    /// announcement that arrives while it opens is not lost.
    pub(crate) fn watch(&self, queue: &str) -> Signals {
        let (tx, rx) = mpsc::unbounded_channel();
        self.map().insert(queue.to_owned(), tx);
        rx
    }

    /// Stops telling `queue`'s subscription (it closed).
    pub(crate) fn forget(&self, queue: &str) {
        self.map().remove(queue);
    }

    fn announced(&self, queue: &str, paused: bool) {
        if let Some(tx) = self.map().get(queue) {
            let _ = tx.send(Some(paused));
        }
    }

    fn look_again(&self) {
        for tx in self.map().values() {
            let _ = tx.send(None);
        }
    }
}

/// The queue and state an announcement names, if it is one.
fn parse(delivery: &lapin::message::Delivery) -> Option<(String, bool)> {
    let paused = match delivery.properties.kind().as_ref()?.as_str() {
        PAUSE => true,
        RESUME => false,
        _ => return None,
    };
    let queue = std::str::from_utf8(&delivery.data).ok()?;
    validate_queue_name(queue).ok()?;
    Some((queue.to_owned(), paused))
}

async fn bind(link: &Link) -> Result<(Channel, Consumer)> {
    let ch = link.channel().await?;
    declare_exchange(&ch).await?;
    let opts = QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..QueueDeclareOptions::default()
    };
    let q = ch
        .queue_declare("".into(), opts, FieldTable::default())
        .await
        .map_err(|e| amqp_err("declaring a control queue", e))?;
    let name = q.name().clone();
    ch.queue_bind(
        name.clone(),
        CONTROL_EXCHANGE.into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(|e| amqp_err(format!("binding a control queue to {CONTROL_EXCHANGE}"), e))?;
    let opts = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let consumer = ch
        .basic_consume(name, "hopper-control".into(), opts, FieldTable::default())
        .await
        .map_err(|e| amqp_err("consuming announcements", e))?;
    Ok((ch, consumer))
}

/// Listens for announcements until the broker closes, binding again with backoff after a
/// loss; after each bind every subscription looks at its flag again. `bound` is told once
/// the first attempt is over, bound or not.
pub(crate) async fn listen(
    link: SharedLink,
    signals: Arc<PauseSignals>,
    mut bound: Option<oneshot::Sender<()>>,
) {
    use std::sync::atomic::Ordering;
    let (min, max) = link.backoff;
    let mut wait = min;
    loop {
        let attempt = bind(&link).await;
        if let Some(tx) = bound.take() {
            let _ = tx.send(());
        }
        match attempt {
            Ok((channel, mut consumer)) => {
                wait = min;
                signals.look_again();
                while let Some(Ok(d)) = consumer.next().await {
                    if let Some((queue, paused)) = parse(&d) {
                        signals.announced(&queue, paused);
                    }
                }
                let _ = channel.close(200, "reopening".into()).await;
                if link.closed.load(Ordering::Acquire) {
                    return;
                }
                tracing::warn!("the pause announcements' consumer ended; binding again");
            }
            Err(e) => {
                if link.closed.load(Ordering::Acquire) {
                    return;
                }
                tracing::warn!(error = %e.chain(), retry_in = ?wait,
                    "cannot listen for pause announcements; paused queues are noticed when \
                     their subscriptions open");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::ShortString;

    fn announcement(kind: Option<&str>, body: &[u8]) -> lapin::message::Delivery {
        let mut d = lapin::message::Delivery::mock(
            1,
            ShortString::from(CONTROL_EXCHANGE),
            ShortString::from(""),
            false,
            body.to_vec(),
        );
        if let Some(k) = kind {
            d.properties = BasicProperties::default().with_type(k.into());
        }
        d
    }

    #[test]
    fn announcements_name_a_valid_queue_and_a_known_state() {
        assert_eq!(
            parse(&announcement(Some(PAUSE), b"emails")),
            Some(("emails".to_owned(), true))
        );
        assert_eq!(
            parse(&announcement(Some(RESUME), b"emails")),
            Some(("emails".to_owned(), false))
        );
        assert_eq!(parse(&announcement(None, b"emails")), None);
        assert_eq!(parse(&announcement(Some("other"), b"emails")), None);
        assert_eq!(parse(&announcement(Some(PAUSE), b"no spaces")), None);
        assert_eq!(parse(&announcement(Some(PAUSE), &[0xff])), None);
    }

    #[test]
    fn an_announcement_reaches_only_the_queue_it_names() {
        let signals = PauseSignals::default();
        let mut a = signals.watch("a");
        let mut b = signals.watch("b");
        signals.announced("a", true);
        signals.announced("c", true);
        assert_eq!(a.try_recv(), Ok(Some(true)));
        assert!(b.try_recv().is_err());
        signals.look_again();
        assert_eq!((a.try_recv(), b.try_recv()), (Ok(None), Ok(None)));
        signals.forget("b");
        assert_eq!(
            b.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected),
            "forgotten"
        );
    }
}
