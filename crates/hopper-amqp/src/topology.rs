//! Queues Hopper declares: work queues and their dead-letter queues (when asked to), and
//! the retry queues that hold delayed jobs and retries until they are due.
//!
//! A delay is a stay in a retry queue `<queue>.retry.<ms>` whose messages live `ms`
//! (`x-message-ttl`) and then dead-letter back to `<queue>` through the default exchange.
//! The delay is on the server, so it survives a worker crash. Each retry queue has one
//! TTL, so its messages expire in the order they came and none waits behind a longer one
//! (RabbitMQ only expires messages at a queue's head). Delays are rounded up to a bounded
//! set of [`RETRY_BUCKETS_MS`], so a queue never has more than that many retry queues, and
//! idle ones delete themselves (`x-expires`).
//!
//! Two names serve operators rather than jobs: the empty queue `hopper.paused.<queue>`
//! whose existence pauses `<queue>` for every worker on the virtual host, and the fanout
//! exchange [`CONTROL_EXCHANGE`] that tells running workers at once (see `crate::control`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hopper_core::{ConfigError, Error, Result};
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::conn::{Link, amqp_err, is_not_found};
use crate::options::{AmqpOptions, QueueKind};

/// The delays retry queues exist for, 1-2-5 steps from 10 ms to a day: a delay is rounded
/// up to the next (never run early), so at most 2.5 times longer, and a delay above a day
/// waits a day.
pub const RETRY_BUCKETS_MS: &[u64] = &[
    10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000,
    500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000, 50_000_000, 86_400_000,
];

/// A retry queue is re-declared before a publish once this long has passed since its last
/// declaration, which restarts its `x-expires` clock (2 × TTL + 10 min): every message in
/// it then leaves before the queue may expire.
const REDECLARE_AFTER: Duration = Duration::from_secs(300);

/// The retry bucket a delay goes to, or `None` when it is due at once.
pub fn retry_bucket(delay: Duration) -> Option<u64> {
    if delay.is_zero() {
        return None;
    }
    let ms = delay.as_millis();
    let last = *RETRY_BUCKETS_MS.last().expect("not empty");
    Some(
        RETRY_BUCKETS_MS
            .iter()
            .copied()
            .find(|&b| b as u128 >= ms)
            .unwrap_or(last),
    )
}

/// The name of `queue`'s retry queue for `bucket_ms`.
pub fn retry_queue(queue: &str, bucket_ms: u64) -> String {
    format!("{queue}.retry.{bucket_ms}")
}

/// The name of the dead-letter queue Hopper declares for `queue` when it declares topology.
pub fn dead_queue(queue: &str) -> String {
    format!("{queue}.dead")
}

/// The empty durable queue whose existence pauses `queue` for every Hopper worker on the
/// virtual host: it outlives every process, so a worker that starts later finds it.
pub fn paused_queue(queue: &str) -> String {
    format!("hopper.paused.{queue}")
}

/// The fanout exchange pauses and resumes are announced on, so that running workers stop or
/// start consuming at once instead of looking at the flag queue now and then.
pub const CONTROL_EXCHANGE: &str = "hopper.control";

/// How many messages are ready in `queue`, or `None` when it does not exist. A passive
/// declare on a channel of its own: the server closes the channel when the queue is missing.
pub(crate) async fn depth(link: &Link, queue: &str) -> Result<Option<u64>> {
    Ok(depth_and_consumers(link, queue)
        .await?
        .map(|(depth, _)| depth))
}

/// The messages ready in `queue` and the consumers on it, as a passive declare reports
/// them; `None` when the queue does not exist.
pub(crate) async fn depth_and_consumers(link: &Link, queue: &str) -> Result<Option<(u64, u64)>> {
    let ch = link.channel().await?;
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
            Ok(Some((
                u64::from(q.message_count()),
                u64::from(q.consumer_count()),
            )))
        }
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(amqp_err(format!("counting queue {queue}"), e)),
    }
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

#[derive(Debug)]
pub(crate) struct Topology {
    options: AmqpOptions,
    declared: Mutex<HashSet<String>>,
    retries: Mutex<HashMap<String, Instant>>,
}

impl Topology {
    pub(crate) fn new(options: AmqpOptions) -> Self {
        Topology {
            options,
            declared: Mutex::new(HashSet::new()),
            retries: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn options(&self) -> &AmqpOptions {
        &self.options
    }

    pub(crate) fn kind(&self, queue: &str) -> QueueKind {
        self.options.settings(queue).kind
    }

    /// Where a dead letter of `queue` is published with its error: the configured
    /// exchange, else the declared `<queue>.dead`, else nowhere (`None`: reject it).
    pub(crate) fn dead_letter_target(&self, queue: &str) -> Option<(String, String)> {
        let s = self.options.settings(queue);
        match &s.dead_letter_exchange {
            Some(ex) => Some((
                ex.clone(),
                s.dead_letter_routing_key
                    .clone()
                    .unwrap_or_else(|| queue.to_owned()),
            )),
            None if self.options.declare => Some((String::new(), dead_queue(queue))),
            None => None,
        }
    }

    /// The queue that holds `queue`'s dead letters, when Hopper can tell which: `<queue>.dead`
    /// unless a dead-letter exchange is configured (whether or not this process declares
    /// it), the routing key's queue when that exchange is the default one, else `None`: an
    /// exchange of its own routes them wherever its bindings say.
    pub(crate) fn dead_letter_queue(&self, queue: &str) -> Option<String> {
        let s = self.options.settings(queue);
        match &s.dead_letter_exchange {
            None => Some(dead_queue(queue)),
            Some(ex) if ex.is_empty() => {
                s.dead_letter_routing_key.clone().filter(|key| key != queue)
            }
            Some(_) => None,
        }
    }

    /// Retry queues of `queue` this process declared, for counting what is scheduled.
    pub(crate) fn retry_queues_of(&self, queue: &str) -> Vec<String> {
        let prefix = format!("{queue}.retry.");
        let retries = self.retries.lock().unwrap_or_else(|e| e.into_inner());
        retries
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// Whether Hopper declares the queues it uses.
    pub(crate) fn declares(&self) -> bool {
        self.options.declare
    }

    /// Whether this process declared `queue` and has not found it deleted since.
    pub(crate) fn is_declared(&self, queue: &str) -> bool {
        self.declared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(queue)
    }

    /// Forgets that `queue` was declared (a retry queue, a dead-letter queue, or the queue
    /// they belong to): the server said it does not exist, so someone deleted it, and the
    /// next [`ensure_queue`](Self::ensure_queue) or [`ensure_retry`](Self::ensure_retry)
    /// declares it again.
    pub(crate) fn forget(&self, queue: &str) {
        let mut declared = self.declared.lock().unwrap_or_else(|e| e.into_inner());
        declared.remove(queue);
        if let Some(base) = queue.strip_suffix(".dead") {
            declared.remove(base);
        }
        drop(declared);
        self.retries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(queue);
    }

    /// Declares `queue` and its dead-letter queue once per process, when topology is on.
    pub(crate) async fn ensure_queue(&self, link: &Link, queue: &str) -> Result<()> {
        if !self.options.declare {
            return Ok(());
        }
        {
            let declared = self.declared.lock().unwrap_or_else(|e| e.into_inner());
            if declared.contains(queue) {
                return Ok(());
            }
        }
        let settings = self.options.settings(queue);
        let kind = settings.kind;
        let mut args = FieldTable::default();
        args.insert("x-queue-type".into(), long(&kind.to_string()));
        let mut dead_args = args.clone();
        match &settings.dead_letter_exchange {
            Some(ex) => {
                args.insert("x-dead-letter-exchange".into(), long(ex));
                let key = settings.dead_letter_routing_key.as_deref().unwrap_or(queue);
                args.insert("x-dead-letter-routing-key".into(), long(key));
            }
            None => {
                args.insert("x-dead-letter-exchange".into(), long(""));
                args.insert("x-dead-letter-routing-key".into(), long(&dead_queue(queue)));
            }
        }
        if kind == QueueKind::Quorum {
            let limit = settings
                .delivery_limit
                .unwrap_or(hopper_core::job::DEFAULT_MAX_ATTEMPTS);
            args.insert(
                "x-delivery-limit".into(),
                AMQPValue::LongLongInt(i64::from(limit)),
            );
        }
        // A dead-letter queue has no dead-letter target of its own.
        dead_args.insert("x-queue-type".into(), long(&kind.to_string()));
        if settings.dead_letter_exchange.is_none() {
            declare(link, &dead_queue(queue), dead_args).await?;
        }
        declare(link, queue, args).await?;
        self.declared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(queue.to_owned());
        Ok(())
    }

    /// Declares `queue`'s retry queue for `bucket_ms` when this process has not done so
    /// lately, and returns its name.
    pub(crate) async fn ensure_retry(
        &self,
        link: &Link,
        queue: &str,
        bucket_ms: u64,
    ) -> Result<String> {
        let name = retry_queue(queue, bucket_ms);
        let fresh = {
            let retries = self.retries.lock().unwrap_or_else(|e| e.into_inner());
            retries
                .get(&name)
                .is_some_and(|at| at.elapsed() < REDECLARE_AFTER)
        };
        if fresh {
            return Ok(name);
        }
        let mut args = FieldTable::default();
        args.insert("x-queue-type".into(), long("classic"));
        args.insert(
            "x-message-ttl".into(),
            AMQPValue::LongLongInt(bucket_ms as i64),
        );
        args.insert("x-dead-letter-exchange".into(), long(""));
        args.insert("x-dead-letter-routing-key".into(), long(queue));
        let expires = bucket_ms * 2 + 600_000;
        args.insert("x-expires".into(), AMQPValue::LongLongInt(expires as i64));
        declare(link, &name, args).await?;
        self.retries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone(), Instant::now());
        Ok(name)
    }
}

async fn declare(link: &Link, queue: &str, args: FieldTable) -> Result<()> {
    let ch = link.channel().await?;
    let opts = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let result = ch.queue_declare(ShortString::from(queue), opts, args).await;
    let _ = ch.close(200, "declared".into()).await;
    match result {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if p.get_id() == 406) => {
            Err(Error::Config(ConfigError::new(
                "queue",
                queue,
                format!(
                    "a queue Hopper can declare; it exists on the server with other arguments \
                     ({e}): delete it, or connect with declare=false to use it as it is"
                ),
            )))
        }
        Err(e) => Err(amqp_err(format!("declaring queue {queue}"), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_up_into_a_bounded_set_of_buckets() {
        assert_eq!(retry_bucket(Duration::ZERO), None);
        assert_eq!(retry_bucket(Duration::from_millis(1)), Some(10));
        assert_eq!(retry_bucket(Duration::from_millis(1_000)), Some(1_000));
        assert_eq!(retry_bucket(Duration::from_millis(1_001)), Some(2_000));
        assert_eq!(retry_bucket(Duration::from_secs(3)), Some(5_000));
        assert_eq!(
            retry_bucket(Duration::from_secs(7 * 86_400)),
            Some(86_400_000)
        );
        assert_eq!(RETRY_BUCKETS_MS.len(), 22);
        assert!(
            RETRY_BUCKETS_MS
                .windows(2)
                .all(|w| w[1] as f64 / w[0] as f64 <= 2.5)
        );
    }
}
