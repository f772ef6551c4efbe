//! One subscription: a channel of its own with one consumer on it, and a task that moves
//! the server's pushes into a local buffer that [`fetch`](hopper_core::Broker::fetch) takes
//! from.
//!
//! Each channel the subscription opens gets a new *generation* from a process-wide counter.
//! A delivery's id carries its generation and delivery tag
//! ([`wire::delivery_id`](crate::wire::delivery_id)), so a settlement finds its channel,
//! and one naming a channel that is gone (the connection was lost, or the subscription
//! closed) is fenced: the server has already put that delivery back, and its tag means
//! nothing on the next channel.
//!
//! A paused queue's subscription keeps its channel and window but has no consumer (see
//! `crate::control`): nothing arrives until it is resumed.
//!
//! Here: the [`Subscription`] handle, starting and closing it and re-sizing its window.
//! - [`state`]: [`SubState`], what the subscription knows of its open channel;
//! - [`task`]: the task that runs the consumer and obeys the handle's commands;
//! - [`consumer`]: opening the channel under a new generation, consuming, re-windowing,
//!   pausing and resuming;
//! - [`buffer`]: the deliveries that arrived, pushed into the buffer and taken by a fetch;
//! - [`send`]: acknowledgements held until due, and frames queued without waiting.

mod buffer;
mod consumer;
mod send;
mod state;
mod task;

use std::sync::{Arc, Mutex, MutexGuard};

use hopper_core::Result;
use lapin::Channel;
use tokio::sync::{mpsc, oneshot, watch};

pub(crate) use self::send::{queue_frame, send_acks};
use self::state::SubState;
use self::task::{Cmd, run};
use crate::acks::HeldAcks;
use crate::conn::SharedLink;
use crate::control::Signals;
use crate::options::QueueKind;
use crate::topology::Topology;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) queue: String,
    kind: QueueKind,
    /// Declares the queue again before a consumer is reopened on it, if it was deleted.
    topology: Arc<Topology>,
    state: Mutex<SubState>,
    /// Held while a settlement batch of this subscription is worked out and sent, so two
    /// batches never interleave: an ack with `multiple` covers every earlier tag the
    /// server still holds, and a concurrent batch's acknowledgement of one of those would
    /// then name a tag already gone, which closes the channel.
    pub(crate) settling: tokio::sync::Mutex<()>,
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl Subscription {
    /// Starts a subscription task and waits until its consumer runs, or would if the queue
    /// were not paused (or its first attempt failed: the task keeps retrying with backoff).
    /// `signals` says when the queue's pause flag should be read again.
    pub(crate) async fn start(
        link: SharedLink,
        topology: Arc<Topology>,
        queue: &str,
        kind: QueueKind,
        window: Option<u16>,
        wake: watch::Sender<u64>,
        signals: Signals,
    ) -> (Arc<Subscription>, Result<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let sub = Arc::new(Subscription {
            queue: queue.to_owned(),
            kind,
            topology,
            state: Mutex::new(SubState {
                window,
                held_acks: HeldAcks::new(link.ack_hold),
                ..SubState::default()
            }),
            settling: tokio::sync::Mutex::new(()),
            cmds: tx,
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(run(sub.clone(), link, wake, rx, signals, Some(ready_tx)));
        let ready = ready_rx
            .await
            .unwrap_or(Err(hopper_core::Error::Closed("subscription")));
        (sub, ready)
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, SubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-sizes the window: the consumer is cancelled and started again under the new one.
    pub(crate) async fn set_window(&self, window: Option<u16>) -> Result<()> {
        if self.state().window == window {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Window(window, tx)).is_err() {
            return Err(hopper_core::Error::Closed("subscription"));
        }
        rx.await
            .unwrap_or(Err(hopper_core::Error::Closed("subscription")))
    }

    /// Closes the channel: the server requeues what it held unsettled, marked redelivered.
    pub(crate) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Sends the held acks and closes the channel, with no settlement batch in between
    /// (one arriving later finds the channel gone and is fenced), then forgets it.
    async fn close_channel(&self, channel: &Channel, why: &str) {
        let _serial = self.settling.lock().await;
        self.send_held_acks_serialized(true).await;
        let _ = channel.close(200, why.into()).await;
        self.lose();
    }

    /// Forgets the channel: its deliveries are the server's again.
    fn lose(&self) {
        let mut st = self.state();
        st.channel = None;
        st.buffer.clear();
        st.unsettled.clear();
        st.held_acks.clear();
    }
}
