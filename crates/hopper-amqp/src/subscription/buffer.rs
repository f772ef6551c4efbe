//! The deliveries that arrived: pushed into the subscription's buffer, as many as have
//! arrived under one lock, and taken from it by a fetch.

use futures_util::{FutureExt, StreamExt};
use hopper_core::{Job, JobCopy};
use lapin::Consumer;
use lapin::message::Delivery;
use tokio::sync::watch;

use super::Subscription;
use crate::unsettled::Held;
use crate::wire;

impl Subscription {
    /// Takes up to `limit` buffered deliveries.
    pub(crate) fn take(&self, limit: usize) -> Vec<Job> {
        let mut st = self.state();
        let n = limit.min(st.buffer.len());
        st.buffer.drain(..n).collect()
    }

    pub(super) fn push(&self, delivery: Delivery, generation: u64, wake: &watch::Sender<u64>) {
        self.push_all(vec![delivery], generation, wake);
    }

    /// Buffers `deliveries` of channel `generation` under one lock, and wakes the worker
    /// once.
    pub(super) fn push_all(
        &self,
        deliveries: Vec<Delivery>,
        generation: u64,
        wake: &watch::Sender<u64>,
    ) {
        let at = wire::now_ms();
        let decoded: Vec<(u64, Job, Held)> = deliveries
            .into_iter()
            .map(|delivery| {
                let tag = delivery.delivery_tag;
                let message_id = delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|m| m.as_str().to_owned());
                let error = wire::carried_error(&delivery.properties);
                let job = wire::decode(delivery, &self.queue, generation, self.kind, at);
                let held = Held {
                    copy: JobCopy::new(&job),
                    message_id,
                    error,
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
}

/// Most deliveries taken in one push (see [`ready_deliveries`]).
const PUSH_MAX: usize = 256;

/// `first` and the deliveries `consumer` already holds after it, up to [`PUSH_MAX`], without
/// waiting; and how the stream ended if it did meanwhile (`Ok` for ended by the server).
pub(super) fn ready_deliveries(
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use lapin::options::{
        BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
        QueueDeclareOptions,
    };
    use lapin::types::FieldTable;
    use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

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
