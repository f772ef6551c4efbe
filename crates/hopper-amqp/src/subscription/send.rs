//! Sending acknowledgements on a subscription's channel: the held ones once they are due,
//! and every frame queued on the channel without waiting for its write.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use lapin::Channel;
use lapin::options::BasicAckOptions;

use super::Subscription;
use crate::acks::AckFrames;

impl Subscription {
    /// Makes sure held acks go out once due: starts the task that sends them, unless there
    /// are none or one is waiting already.
    pub(crate) fn send_held_acks_when_due(self: &Arc<Self>) {
        {
            let mut st = self.state();
            if st.held_acks.is_empty() || st.held_acks_timer {
                return;
            }
            st.held_acks_timer = true;
        }
        let sub = self.clone();
        tokio::spawn(async move {
            loop {
                let due = {
                    let mut st = sub.state();
                    let due = st.held_acks.due();
                    st.held_acks_timer = due.is_some();
                    due
                };
                let Some(due) = due else { return };
                tokio::time::sleep_until(due.into()).await;
                sub.send_held_acks(false).await;
            }
        });
    }

    /// Sends the held acks that are due, or every one with `all`, after any settlement
    /// batch in progress. A send that fails leaves those deliveries to the server, which
    /// puts them back once the channel closes.
    pub(crate) async fn send_held_acks(&self, all: bool) {
        let _serial = self.settling.lock().await;
        self.send_held_acks_serialized(all).await;
    }

    /// [`send_held_acks`](Self::send_held_acks) for a caller already holding `settling`.
    pub(super) async fn send_held_acks_serialized(&self, all: bool) {
        let (channel, frames) = {
            let mut st = self.state();
            (st.channel.clone(), st.plan_acks(&[], all))
        };
        if let Some(channel) = channel {
            if send_acks(&channel, &frames).is_err() {
                tracing::warn!(queue = %self.queue, "held acks not sent: the channel closed; the server redelivers those jobs");
            }
        }
    }
}

/// Queues `frames` on `channel`, in order, without waiting for lapin's I/O thread to write
/// them (see [`queue_frame`]), so a settlement does not cost a wake-up of the I/O thread and
/// another of the settling task before the next can go. Frames go out in the order they
/// were queued, which is all the grouping needs (see [`crate::acks`]).
///
/// Then this thread yields its core (`sched_yield`): the I/O thread, just woken to write
/// the acks, may be waiting for this very core, and until the server reads an ack it
/// pushes nothing into the window that ack frees. Where the I/O thread runs elsewhere, the
/// yield returns at once. On a 2-core host at a window of 10, where every fifth delivery
/// sends an ack, a worker drained 34.4k msgs/s with it against 28.5k without (medians of
/// 14 interleaved rounds; BENCHMARKS.md, the thirteenth session).
pub(crate) fn send_acks(channel: &Channel, frames: &AckFrames) -> lapin::Result<()> {
    if frames.is_empty() {
        return Ok(());
    }
    for (tag, multiple) in frames.frames() {
        queue_frame(channel.basic_ack(tag, BasicAckOptions { multiple }))?;
    }
    std::thread::yield_now();
    Ok(())
}

/// Polls a lapin call that sends one frame (an ack, a nack, a reject) once: its frame is
/// queued then, after those queued before it, and the rest of the call only waits for the
/// write, which is left out. A frame that is queued but never written means the channel or
/// the connection was lost, and the server puts the delivery back: it runs again, as after
/// any lost acknowledgement, and a release or a reject is then what the server does anyway.
/// So an error here, and the "held acks not sent" warning, means a channel already known to
/// be closed; and a settlement never waits on a server gone silent.
pub(crate) fn queue_frame(call: impl Future<Output = lapin::Result<()>>) -> lapin::Result<()> {
    let call = std::pin::pin!(call);
    match call.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Err(e)) => Err(e),
        Poll::Ready(Ok(())) | Poll::Pending => Ok(()),
    }
}
