//! [`AmqpOptions`]: the default window, per-queue settings, topology, confirms and
//! reconnection of a broker, and the `?key=value` settings an `amqp://` URL may carry.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use hopper_core::job::validate_queue_name;
use hopper_core::{ConfigError, Limits};

/// The largest window AMQP can express: `basic.qos` carries a 16-bit prefetch count.
pub const MAX_WINDOW: u32 = u16::MAX as u32;

/// The kind of queue Hopper declares (when it declares topology) and counts attempts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueKind {
    /// A classic queue: attempts are counted by Hopper in the `x-hopper-attempt` header, so
    /// a delivery returned by a crash (the redelivered flag) is not charged.
    #[default]
    Classic,
    /// A quorum queue: the server's `x-delivery-count` is added to Hopper's header, so
    /// crash redeliveries are charged too (and so are releases: the server cannot tell).
    Quorum,
}

impl fmt::Display for QueueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QueueKind::Classic => "classic",
            QueueKind::Quorum => "quorum",
        })
    }
}

impl FromStr for QueueKind {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "classic" => Ok(QueueKind::Classic),
            "quorum" => Ok(QueueKind::Quorum),
            other => Err(ConfigError::new(
                "queue_type",
                other,
                "`classic` or `quorum`",
            )),
        }
    }
}

/// How one queue is set up and where its dead letters go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSettings {
    /// Classic or quorum.
    pub kind: QueueKind,
    /// Where [`DeadLetter`](hopper_core::Outcome::DeadLetter) publishes a copy carrying the
    /// error. Without one (and without declared topology), a dead letter is a
    /// `basic.reject` without requeue: the queue's own dead-letter policy decides, and the
    /// error is only logged.
    pub dead_letter_exchange: Option<String>,
    /// The routing key of those copies; default: the queue's name.
    pub dead_letter_routing_key: Option<String>,
    /// Quorum queues Hopper declares: the server's `x-delivery-limit`, the most times the
    /// server hands one message out before it dead-letters it itself. The backstop for a
    /// job that kills its worker before the worker can count the attempt. `None`: Hopper's
    /// default max attempts, 25. Ignored for classic queues, which have no such limit.
    pub delivery_limit: Option<u32>,
}

impl QueueSettings {
    /// A classic queue with no dead-letter exchange.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the queue kind.
    pub fn kind(mut self, kind: QueueKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sends dead letters to `exchange` (routing key: the queue's name unless set).
    pub fn dead_letter_exchange(mut self, exchange: impl Into<String>) -> Self {
        self.dead_letter_exchange = Some(exchange.into());
        self
    }

    /// The routing key of dead letters.
    pub fn dead_letter_routing_key(mut self, key: impl Into<String>) -> Self {
        self.dead_letter_routing_key = Some(key.into());
        self
    }

    /// Sets [`delivery_limit`](Self::delivery_limit).
    pub fn delivery_limit(mut self, limit: u32) -> Self {
        self.delivery_limit = Some(limit);
        self
    }
}

/// How an [`AmqpBroker`](crate::AmqpBroker) connects and behaves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AmqpOptions {
    /// The window of a subscription whose queue sets no `prefetch` (1..=65535). `None` (the
    /// default): no `basic.qos` at all, so the server pushes without limit.
    pub prefetch: Option<u32>,
    /// Settings of named queues; others get [`default_queue`](Self::default_queue).
    pub queues: BTreeMap<String, QueueSettings>,
    /// Settings of every queue not named in [`queues`](Self::queues).
    pub default_queue: QueueSettings,
    /// Declare each queue on first use (durable, of its kind) with a dead-letter queue
    /// `<queue>.dead` as its dead-letter target. Off by default: many teams manage their
    /// topology themselves, and then a missing queue is an error, not a silent creation.
    /// Retry queues (`<queue>.retry.<ms>`) are Hopper's own and are always declared.
    pub declare: bool,
    /// Publisher confirms (default on): an enqueue returns once the server has the jobs.
    pub confirms: bool,
    /// The first wait before reconnecting after a lost connection (default 100 ms); it
    /// doubles after each failed attempt…
    pub reconnect_min: Duration,
    /// …up to this (default 5 s).
    pub reconnect_max: Duration,
    /// The name the connections show in RabbitMQ's management (`connection_name`).
    pub connection_name: Option<String>,
    /// The longest a finished job's ack may wait (default 100 ms) for the delivery below
    /// it to settle, so that one `basic.ack` with `multiple` covers both: an ack frame
    /// costs the server far more than a delivery. Held acks are sent one by one once they
    /// reach half the window or wait this long; a connection lost meanwhile runs those jobs
    /// again. Zero sends every ack at once. At most [`MAX_ACK_HOLD`].
    pub ack_hold: Duration,
    /// The largest payload an enqueue accepts, in bytes (default
    /// [`DEFAULT_MAX_PAYLOAD`](hopper_core::job::DEFAULT_MAX_PAYLOAD), 8 MiB; at most
    /// 512 MiB). RabbitMQ 4 refuses messages over 16 MiB unless its `max_message_size` is
    /// raised, and closes the channel when it does.
    pub max_payload: usize,
}

/// The longest [`AmqpOptions::ack_hold`] allowed.
pub const MAX_ACK_HOLD: Duration = Duration::from_secs(10);

impl Default for AmqpOptions {
    fn default() -> Self {
        AmqpOptions {
            prefetch: None,
            queues: BTreeMap::new(),
            default_queue: QueueSettings::default(),
            declare: false,
            confirms: true,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            connection_name: None,
            ack_hold: Duration::from_millis(100),
            max_payload: hopper_core::job::DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl AmqpOptions {
    /// The defaults: no default window, classic queues, no declarations, confirms on.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the default window (see [`prefetch`](Self::prefetch)).
    pub fn prefetch(mut self, window: u32) -> Self {
        self.prefetch = Some(window);
        self
    }

    /// Sets one queue's settings.
    pub fn queue(mut self, name: impl Into<String>, settings: QueueSettings) -> Self {
        self.queues.insert(name.into(), settings);
        self
    }

    /// Sets the kind of every queue not named otherwise.
    pub fn queue_kind(mut self, kind: QueueKind) -> Self {
        self.default_queue.kind = kind;
        self
    }

    /// Declares queues on first use.
    pub fn declare(mut self, on: bool) -> Self {
        self.declare = on;
        self
    }

    /// Turns publisher confirms on or off.
    pub fn confirms(mut self, on: bool) -> Self {
        self.confirms = on;
        self
    }

    /// Sets the reconnection backoff: first wait and ceiling.
    pub fn reconnect(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
        self
    }

    /// Names the connections (shown by `rabbitmqctl list_connections user_provided_name`).
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = Some(name.into());
        self
    }

    /// Sets [`ack_hold`](Self::ack_hold).
    pub fn ack_hold(mut self, hold: Duration) -> Self {
        self.ack_hold = hold;
        self
    }

    /// Sets [`max_payload`](Self::max_payload).
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// The settings of `queue`.
    pub fn settings(&self, queue: &str) -> &QueueSettings {
        self.queues.get(queue).unwrap_or(&self.default_queue)
    }

    /// Reads Hopper's settings from an `amqp://` URL's query (`prefetch`, `declare`,
    /// `queue_type`, `confirms`, `ack_hold_ms`, `max_payload`) over these options; other keys are left to lapin
    /// (`heartbeat`, `frame_max`, `connection_timeout`, …).
    pub fn with_url_settings(mut self, url: &str) -> Result<Self, ConfigError> {
        let Some((_, query)) = url.split_once('?') else {
            return Ok(self);
        };
        let flag = |key: &str, value: &str| match value {
            "true" | "1" | "on" => Ok(true),
            "false" | "0" | "off" => Ok(false),
            other => Err(ConfigError::new(key, other, "true or false")),
        };
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "prefetch" => {
                    let n = value.parse::<u32>().map_err(|_| {
                        ConfigError::new("prefetch", value, format!("1..={MAX_WINDOW}"))
                    })?;
                    self.prefetch = Some(n);
                }
                "declare" => self.declare = flag("declare", value)?,
                "confirms" => self.confirms = flag("confirms", value)?,
                "queue_type" => self.default_queue.kind = value.parse()?,
                "ack_hold_ms" => {
                    let ms = value
                        .parse::<u64>()
                        .map_err(|_| ConfigError::new("ack_hold_ms", value, ack_hold_allowed()))?;
                    self.ack_hold = Duration::from_millis(ms);
                }
                "max_payload" => self.max_payload = Limits::parse_max_payload(value)?.max_payload,
                _ => {}
            }
        }
        Ok(self)
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        Limits::max_payload(self.max_payload)?;
        if let Some(w) = self.prefetch {
            validate_window("prefetch", w)?;
        }
        for name in self.queues.keys() {
            validate_queue_name(name)?;
        }
        if self.ack_hold > MAX_ACK_HOLD {
            return Err(ConfigError::new(
                "ack_hold",
                format!("{:?}", self.ack_hold),
                ack_hold_allowed(),
            ));
        }
        if self.reconnect_min.is_zero() || self.reconnect_max < self.reconnect_min {
            return Err(ConfigError::new(
                "reconnect",
                format!("{:?}..{:?}", self.reconnect_min, self.reconnect_max),
                "a first wait above zero and a ceiling at least as long",
            ));
        }
        Ok(())
    }
}

fn ack_hold_allowed() -> String {
    format!(
        "0 to {} ms (0 sends every ack at once)",
        MAX_ACK_HOLD.as_millis()
    )
}

/// A window is a non-zero 16-bit count: `basic.qos` with 0 would mean "no limit", which is
/// what `None` says, so an explicit 0 is a mistake worth naming.
pub(crate) fn validate_window(setting: &str, window: u32) -> Result<u16, ConfigError> {
    match u16::try_from(window) {
        Ok(0) | Err(_) => Err(ConfigError::new(
            setting,
            window,
            format!("1..={MAX_WINDOW} (leave it unset for no limit)"),
        )),
        Ok(w) => Ok(w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_settings_are_read_and_bad_ones_named() {
        let o = AmqpOptions::new()
            .with_url_settings(
                "amqp://h/%2f?heartbeat=5&prefetch=20&declare=true&queue_type=quorum",
            )
            .unwrap();
        assert_eq!(o.prefetch, Some(20));
        assert!(o.declare);
        assert_eq!(o.default_queue.kind, QueueKind::Quorum);
        let e = AmqpOptions::new()
            .with_url_settings("amqp://h?queue_type=stream")
            .unwrap_err();
        assert_eq!(e.setting, "queue_type");
        let o = AmqpOptions::new()
            .with_url_settings("amqp://h?prefetch=0")
            .unwrap();
        let e = o.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid prefetch `0`: allowed: 1..=65535 (leave it unset for no limit)"
        );
        assert!(validate_window("prefetch", 70_000).is_err());
        let o = AmqpOptions::new()
            .with_url_settings("amqp://h?max_payload=2MiB")
            .unwrap();
        assert_eq!(o.max_payload, 2 << 20);
        let e = AmqpOptions::new()
            .with_url_settings("amqp://h?max_payload=lots")
            .unwrap_err();
        assert_eq!(
            (e.setting.as_str(), e.value.as_str()),
            ("max_payload", "lots")
        );
    }

    #[test]
    fn the_ack_hold_is_read_from_the_url_and_bounded() {
        assert_eq!(AmqpOptions::new().ack_hold, Duration::from_millis(100));
        let o = AmqpOptions::new()
            .with_url_settings("amqp://h/%2f?ack_hold_ms=0")
            .unwrap();
        assert_eq!(o.ack_hold, Duration::ZERO);
        o.validate().unwrap();
        let e = AmqpOptions::new()
            .with_url_settings("amqp://h?ack_hold_ms=soon")
            .unwrap_err();
        assert_eq!(e.setting, "ack_hold_ms");
        let e = AmqpOptions::new()
            .ack_hold(Duration::from_secs(11))
            .validate()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid ack_hold `11s`: allowed: 0 to 10000 ms (0 sends every ack at once)"
        );
    }
}
