//! Inspection and administration: counting and purging a queue with its retry and
//! dead-letter queues, an operator's statistics, and deleting queues.
//!
//! What AMQP tells a client of a queue is what a passive `queue.declare` answers: its ready
//! messages and its consumers. How many are delivered and not yet acknowledged, how long
//! the oldest has waited and how many went through lately are the server's to know
//! (its management plugin shows them), not the protocol's.

use futures_util::future::try_join_all;
use hopper_core::job::validate_queue_name;
use hopper_core::{QueueCounts, QueueStatus, Result};
use lapin::options::QueuePurgeOptions;

use super::AmqpBroker;
use crate::conn::{amqp_err, is_not_found};
use crate::control::is_paused;
use crate::topology::{RETRY_BUCKETS_MS, dead_queue, depth, depth_and_consumers, retry_queue};

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
        let pending = depth(&self.inner.link, queue).await?.unwrap_or(0);
        let mut scheduled = 0;
        for rq in self.inner.topology.retry_queues_of(queue) {
            scheduled += depth(&self.inner.link, &rq).await?.unwrap_or(0);
        }
        let dead = match self.inner.topology.dead_letter_target(queue) {
            Some((ex, key)) if ex.is_empty() && key == dead_queue(queue) => {
                depth(&self.inner.link, &key).await?.unwrap_or(0)
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

    /// [`Broker::queue_stats`](hopper_core::Broker::queue_stats), for an operator who may
    /// never have touched the queue from this process: nothing is declared, a queue that
    /// does not exist counts 0, and every retry bucket is looked at, not only the ones
    /// this process declared. `leased` is what this process holds unsettled: the server
    /// does not say through AMQP how many it has delivered to others.
    pub(super) async fn stats(&self, queue: &str) -> Result<QueueStatus> {
        validate_queue_name(queue)?;
        let link = &self.inner.link;
        let retries = RETRY_BUCKETS_MS.iter().map(|&ms| retry_queue(queue, ms));
        let dead = self.inner.topology.dead_letter_queue(queue);
        // One channel each, all at once: an operator's call, ~25 round trips in one.
        let (main, scheduled, dead, paused) = tokio::try_join!(
            depth_and_consumers(link, queue),
            try_join_all(retries.map(|rq| async move { depth(link, &rq).await })),
            async {
                match &dead {
                    Some(d) => depth(link, d).await,
                    None => Ok(None),
                }
            },
            is_paused(link, queue),
        )?;
        let leased = self
            .inner
            .sub(queue)
            .map_or(0, |s| s.state().unsettled.len() as u64);
        Ok(QueueStatus {
            queue: queue.to_owned(),
            counts: QueueCounts {
                pending: main.map_or(0, |(ready, _)| ready),
                scheduled: scheduled.into_iter().flatten().sum(),
                leased,
                dead: dead.unwrap_or(0),
            },
            paused,
            lag: None,
            last_minute: None,
            last_hour: None,
            bound: None,
            consumers: Some(main.map_or(0, |(_, consumers)| consumers)),
            rate_limit: None,
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
