//! Publishing: messages go out on a confirm channel of the call's own, all at once, and
//! one round trip of confirms answers for the lot. A message no queue took comes back
//! with some confirm, not always its own, and is matched to the message it is.

use futures_util::future::join_all;
use hopper_core::{Error, Result};
use lapin::BasicProperties;
use lapin::Confirmation;
use lapin::options::BasicPublishOptions;

use super::AmqpBroker;
use crate::conn::amqp_err;

/// A message to publish and where.
#[derive(Clone)]
pub(super) struct Outgoing {
    pub(super) exchange: String,
    pub(super) routing_key: String,
    pub(super) payload: Vec<u8>,
    pub(super) properties: BasicProperties,
}

/// What became of one published message.
pub(super) enum Published {
    /// The server confirmed it (or confirms are off).
    Taken,
    /// No queue took it: the queue it was routed to does not exist.
    Unroutable(Error),
    /// Refused, or its fate is unknown (the channel closed before the confirm).
    Failed(Error),
}

impl Published {
    pub(super) fn into_result(self) -> Result<()> {
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

impl AmqpBroker {
    /// Publishes messages on a confirm channel of this call's own, all at once, then waits
    /// for every confirmation: one round trip for the lot. One result per message, in order.
    pub(super) async fn publish(&self, messages: &[Outgoing]) -> Result<Vec<Published>> {
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
