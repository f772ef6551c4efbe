//! The broker's connection to RabbitMQ: opened on demand, re-opened after a loss, and the
//! confirm channels publishes go through, one per publish call at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hopper_core::{Error, Result, connect_within};
use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;

use crate::options::AmqpOptions;

/// A lapin error as Hopper's, saying what was being done (its first line then carries
/// lapin's message after it).
pub(crate) fn amqp_err(what: impl Into<String>, e: lapin::Error) -> Error {
    Error::broker(what, e)
}

/// Whether a lapin error is the server refusing because a queue or exchange is missing.
pub(crate) fn is_not_found(e: &lapin::Error) -> bool {
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if p.get_id() == 404)
}

/// One connection at a time, replaced when lost. Every user asks for the current one; the
/// first to find it broken opens the next while the others wait on the lock.
pub(crate) struct Link {
    url: String,
    pub(crate) redacted: String,
    /// How long a new connection may go unanswered (`connect_timeout`, in seconds).
    connect_timeout: Duration,
    name: Option<String>,
    confirms: bool,
    pub(crate) backoff: (Duration, Duration),
    /// [`AmqpOptions::ack_hold`].
    pub(crate) ack_hold: Duration,
    current: Mutex<Option<Arc<Connection>>>,
    /// Publishing channels not lent out, in confirm mode unless confirms are off. Each
    /// publish call has one to itself (see [`Link::publisher`]).
    publishers: std::sync::Mutex<Vec<Channel>>,
    /// Publishing channels lent out at once, at most [`LENT_PUBLISHERS`]: more publish
    /// calls wait, rather than open channels up to the connection's limit.
    lendable: tokio::sync::Semaphore,
    pub(crate) closed: AtomicBool,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("url", &self.redacted).finish()
    }
}

/// The largest frame Hopper asks the server for unless the URL names one (`frame_max=`).
/// lapin keeps a read and a write buffer of 32 frames each per connection: at RabbitMQ's
/// own default of 128 KiB those held 16 MiB, half a worker's resident memory; at 32 KiB
/// they hold 2 MiB. Jobs are far smaller than a frame; a larger payload is sent in
/// several body frames.
pub(crate) const FRAME_MAX: u32 = 32 * 1024;

/// `url` asking for frames of [`FRAME_MAX`] unless it names its own `frame_max`.
fn with_frame_max(mut url: hopper_core::BrokerUrl) -> String {
    url.set_default("frame_max", &FRAME_MAX.to_string());
    url.as_str().to_owned()
}

impl Link {
    pub(crate) fn new(
        url: &hopper_core::BrokerUrl,
        connect_timeout: Duration,
        options: &AmqpOptions,
    ) -> Self {
        Link {
            url: with_frame_max(url.clone()),
            redacted: url.shown().to_owned(),
            connect_timeout,
            name: options.connection_name.clone(),
            confirms: options.confirms,
            backoff: (options.reconnect_min, options.reconnect_max),
            ack_hold: options.ack_hold,
            current: Mutex::new(None),
            publishers: std::sync::Mutex::new(Vec::new()),
            lendable: tokio::sync::Semaphore::new(LENT_PUBLISHERS),
            closed: AtomicBool::new(false),
        }
    }

    async fn open(&self) -> Result<Arc<Connection>> {
        let mut props = ConnectionProperties::default();
        if let Some(name) = &self.name {
            props = props.with_connection_name(name.as_str().into());
        }
        let conn = connect_within(
            &self.redacted,
            self.connect_timeout,
            Connection::connect(&self.url, props),
        )
        .await?
        .map_err(|e| amqp_err(format!("connecting to {}", self.redacted), e))?;
        Ok(Arc::new(conn))
    }

    /// The current connection, or a new one (one attempt) when there is none or it broke.
    pub(crate) async fn connection(&self) -> Result<Arc<Connection>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("amqp broker"));
        }
        let mut current = self.current.lock().await;
        if let Some(conn) = current.as_ref().filter(|c| c.status().connected()) {
            return Ok(conn.clone());
        }
        if current.take().is_some() {
            tracing::warn!(url = %self.redacted, "RabbitMQ connection lost; reconnecting");
        }
        let conn = self.open().await?;
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// A fresh channel for one administrative step (declare, count, purge). Fresh because a
    /// refused step (a queue not found) closes the channel it ran on.
    pub(crate) async fn channel(&self) -> Result<Channel> {
        let conn = self.connection().await?;
        conn.create_channel()
            .await
            .map_err(|e| amqp_err("opening a channel", e))
    }

    /// A publishing channel lent to one publish call until the [`Lent`] is dropped: an idle
    /// one, or a new one (in confirm mode) when none is idle. A call's messages are
    /// pipelined on it and confirmed together. One channel per call, not one shared by all:
    /// when the server confirms several messages in one frame, lapin hands a message it
    /// returned (no queue took it) to any of those confirms, and on a shared channel that
    /// could be another call's.
    pub(crate) async fn publisher(&self) -> Result<Lent<'_>> {
        let permit = self
            .lendable
            .acquire()
            .await
            .map_err(|_| Error::Closed("amqp broker"))?;
        loop {
            let idle = self
                .publishers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop();
            match idle {
                Some(ch) if ch.status().connected() => {
                    return Ok(Lent {
                        link: self,
                        channel: Some(ch),
                        settled: false,
                        _permit: permit,
                    });
                }
                Some(_) => continue, // closed with its connection: dropped
                None => break,
            }
        }
        let ch = self.channel().await?;
        if self.confirms {
            ch.confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| amqp_err("turning on publisher confirms", e))?;
        }
        Ok(Lent {
            link: self,
            channel: Some(ch),
            settled: false,
            _permit: permit,
        })
    }

    /// Whether publishes wait for the server's confirmation.
    pub(crate) fn confirms(&self) -> bool {
        self.confirms
    }

    /// Closes the connection; later calls fail with [`Error::Closed`].
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(conn) = self.current.lock().await.take() {
            let _ = conn.close(200, "hopper broker closed".into()).await;
        }
    }
}

/// Idle publishing channels kept at most; more are closed when given back.
const IDLE_PUBLISHERS: usize = 16;

/// Publishing channels lent out at once at most.
const LENT_PUBLISHERS: usize = 256;

/// A publishing channel lent by [`Link::publisher`]. Dropped after [`Lent::settled`], it
/// goes back to the idle ones; dropped before (its caller gave up while confirms were
/// out), it is closed: a confirm or returned message still to come would otherwise reach
/// the next call on it.
pub(crate) struct Lent<'a> {
    link: &'a Link,
    channel: Option<Channel>,
    settled: bool,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Lent<'_> {
    /// Every confirm of what was published on it has come back (or none was asked).
    pub(crate) fn settled(&mut self) {
        self.settled = true;
    }
}

impl std::ops::Deref for Lent<'_> {
    type Target = Channel;

    fn deref(&self) -> &Channel {
        self.channel.as_ref().expect("lent until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let Some(ch) = self.channel.take() else {
            return;
        };
        if !ch.status().connected() {
            return;
        }
        if self.settled {
            let mut idle = self
                .link
                .publishers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if idle.len() < IDLE_PUBLISHERS {
                idle.push(ch);
                return;
            }
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let why = if self.settled {
                "not needed"
            } else {
                "publish abandoned"
            };
            rt.spawn(async move {
                let _ = ch.close(200, why.into()).await;
            });
        }
    }
}

/// A shared handle: the broker and each subscription task hold one.
pub(crate) type SharedLink = Arc<Link>;

#[cfg(test)]
mod frame_tests {
    use super::*;

    /// Hopper asks for 32 KiB frames unless the URL names a size of its own.
    #[test]
    fn urls_ask_for_small_frames_unless_they_name_one() {
        let framed = |raw: &str| {
            let url = hopper_core::BrokerUrl::parse(raw, &["amqp"], "amqp://").unwrap();
            with_frame_max(url)
        };
        assert_eq!(framed("amqp://h/%2f"), "amqp://h/%2f?frame_max=32768");
        assert_eq!(
            framed("amqp://h/%2f?heartbeat=5"),
            "amqp://h/%2f?heartbeat=5&frame_max=32768"
        );
        assert_eq!(
            framed("amqp://h/%2f?frame_max=131072&heartbeat=5"),
            "amqp://h/%2f?frame_max=131072&heartbeat=5"
        );
    }
}
