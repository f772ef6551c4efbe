//! Dead letters sent back to their queue, or discarded, the oldest first and a chunk at a
//! time: taken from the dead-letter queue with `basic.get` (unacknowledged, so a failure
//! leaves them where they were), re-published to the work queue under publisher confirms,
//! and acknowledged in the dead-letter queue only once every copy is confirmed.
//!
//! A crash between the confirms and the acknowledgement leaves a job both in its queue and
//! still dead: it may run twice, it is never lost.

use futures_util::future::join_all;
use hopper_core::job::validate_queue_name;
use hopper_core::{Broker, ConfigError, Error, Result, Selection};
use lapin::message::BasicGetMessage;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::{Channel, Confirmation};

use super::AmqpBroker;
use crate::conn::{amqp_err, is_not_found};
use crate::wire;

/// Dead letters taken before their copies' confirms are awaited and they are acknowledged:
/// one confirm round trip per chunk, and no more than this held unacknowledged at once.
const CHUNK: usize = 256;

impl AmqpBroker {
    /// [`Broker::retry_dead`](hopper_core::Broker::retry_dead) with `retry`, else
    /// [`Broker::discard_dead`](hopper_core::Broker::discard_dead): how many went.
    pub(super) async fn redrive(&self, which: &Selection, retry: bool) -> Result<u64> {
        let (queue, at_most) = match which {
            Selection::Queue { queue, at_most } => (queue.as_str(), *at_most),
            Selection::Jobs(_) => {
                return Err(self.not_supported(if retry {
                    "re-driving dead letters by id (RabbitMQ cannot take a message out of a \
                     queue by its id; select the queue's oldest instead)"
                } else {
                    "discarding dead letters by id (RabbitMQ cannot take a message out of a \
                     queue by its id; select the queue's oldest instead)"
                }));
            }
        };
        validate_queue_name(queue)?;
        let Some(dead) = self.inner.topology.dead_letter_queue(queue) else {
            return Err(ConfigError::new(
                "queue",
                queue,
                "a queue whose dead letters Hopper can find: its dead-letter exchange routes \
                 them where that exchange's bindings say; read them from there",
            )
            .into());
        };
        if at_most == 0 {
            return Ok(0);
        }
        if retry {
            self.inner
                .topology
                .ensure_queue(&self.inner.link, queue)
                .await?;
        }
        let ch = self.inner.link.channel().await?;
        let moved = self.take_chunks(&ch, queue, &dead, at_most, retry).await;
        // Closing puts back whatever was taken and not acknowledged (a failed chunk).
        let _ = ch.close(200, "dead letters done".into()).await;
        moved
    }

    async fn take_chunks(
        &self,
        ch: &Channel,
        queue: &str,
        dead: &str,
        at_most: usize,
        retry: bool,
    ) -> Result<u64> {
        if retry {
            ch.confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| amqp_err("turning on publisher confirms", e))?;
        }
        let mut done = 0usize;
        while done < at_most {
            let want = CHUNK.min(at_most - done);
            let taken = match take(ch, dead, want).await {
                Ok(taken) => taken,
                // No dead-letter queue: no dead letters. Deleted after an earlier chunk, the
                // ones taken from it went with it.
                Err(e) if is_not_found(&e) => break,
                Err(e) => return Err(amqp_err(format!("taking from queue {dead}"), e)),
            };
            let Some(last) = taken.last().map(|m| m.delivery.delivery_tag) else {
                break;
            };
            if retry {
                self.send_back(ch, queue, &taken).await?;
            }
            ch.basic_ack(last, BasicAckOptions { multiple: true })
                .await
                .map_err(|e| amqp_err(format!("acknowledging dead letters of {dead}"), e))?;
            done += taken.len();
            if taken.len() < want {
                break;
            }
        }
        Ok(done as u64)
    }
}

impl AmqpBroker {
    /// [`publish_back`], and once more after declaring the work queue again if it was
    /// deleted since this process declared it (as an enqueue does). A copy that did reach
    /// the queue before it went may then be there twice.
    async fn send_back(&self, ch: &Channel, queue: &str, taken: &[BasicGetMessage]) -> Result<()> {
        let topology = &self.inner.topology;
        match publish_back(ch, queue, taken).await {
            Ok(()) => Ok(()),
            Err(Refused {
                unroutable: true,
                error,
            }) => {
                topology.forget(queue);
                if !topology.declares() {
                    return Err(error);
                }
                topology.ensure_queue(&self.inner.link, queue).await?;
                publish_back(ch, queue, taken).await.map_err(|r| r.error)
            }
            Err(Refused { error, .. }) => Err(error),
        }
    }
}

/// Up to `n` messages from the head of `queue`, unacknowledged.
async fn take(ch: &Channel, queue: &str, n: usize) -> lapin::Result<Vec<BasicGetMessage>> {
    let mut taken = Vec::new();
    while taken.len() < n {
        match ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await?
        {
            Some(m) => taken.push(m),
            None => break,
        }
    }
    Ok(taken)
}

/// Why a chunk's copies were not all taken.
struct Refused {
    /// No queue took one: the work queue does not exist.
    unroutable: bool,
    error: Error,
}

impl From<Error> for Refused {
    fn from(error: Error) -> Self {
        Refused {
            unroutable: false,
            error,
        }
    }
}

/// Publishes each dead letter back to `queue`, in order, attempts reset, and waits for
/// every confirm. Any refusal, or a copy no queue took, fails the chunk.
async fn publish_back(
    ch: &Channel,
    queue: &str,
    taken: &[BasicGetMessage],
) -> std::result::Result<(), Refused> {
    let opts = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let mut confirms = Vec::with_capacity(taken.len());
    for m in taken {
        let props = wire::redriven(&m.delivery.properties);
        let confirm = ch
            .basic_publish("".into(), queue.into(), opts, &m.delivery.data, props)
            .await
            .map_err(|e| amqp_err(format!("re-publishing a dead letter to {queue}"), e))?;
        confirms.push(confirm);
    }
    for c in join_all(confirms).await {
        match c {
            Ok(Confirmation::Ack(None) | Confirmation::NotRequested) => {}
            Ok(Confirmation::Ack(Some(_))) => {
                return Err(Refused {
                    unroutable: true,
                    error: Error::broker_msg(format!(
                        "no queue took the dead letters sent back to `{queue}`: it does not \
                         exist (declare it, or connect with declare=true); they stay dead"
                    )),
                });
            }
            Ok(Confirmation::Nack(_)) => {
                return Err(Error::broker_msg(format!(
                    "RabbitMQ refused a dead letter sent back to `{queue}` (publisher nack); \
                     it stays dead"
                ))
                .into());
            }
            Err(e) => return Err(amqp_err("waiting for a publisher confirm", e).into()),
        }
    }
    Ok(())
}
