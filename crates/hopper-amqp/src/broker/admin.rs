//! Inspection and administration: counting and purging a queue with its retry and
//! dead-letter queues, and deleting queues.

use hopper_core::job::validate_queue_name;
use hopper_core::{QueueCounts, Result};
use lapin::options::{QueueDeclareOptions, QueuePurgeOptions};
use lapin::types::FieldTable;

use super::AmqpBroker;
use crate::conn::{amqp_err, is_not_found};
use crate::topology::dead_queue;

impl AmqpBroker {
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

    /// [`Broker::counts`](hopper_core::Broker::counts): the queue's ready messages, those
    /// waiting in its retry queues, its `.dead` queue's, and the deliveries held here.
    pub(super) async fn count_queue(&self, queue: &str) -> Result<QueueCounts> {
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

    /// [`Broker::purge`](hopper_core::Broker::purge): the queue, its retry queues and its
    /// `.dead` queue.
    pub(super) async fn purge_queue(&self, queue: &str) -> Result<u64> {
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
}
