//! What a subscription knows of its open channel: the deliveries buffered and unsettled,
//! the window, and the acknowledgements held back.

use std::collections::VecDeque;
use std::time::Instant;

use hopper_core::Job;
use lapin::Channel;

use crate::acks::{AckFrames, HeldAcks, hold_limit};
use crate::unsettled::Unsettled;

#[derive(Debug, Default)]
pub(crate) struct SubState {
    /// The generation of the open channel (or of the last one, once lost).
    pub(crate) generation: u64,
    /// The open channel; `None` while reconnecting or once closed.
    pub(crate) channel: Option<Channel>,
    /// Deliveries not taken by a fetch yet.
    pub(crate) buffer: VecDeque<Job>,
    /// Every delivery of the open channel not settled yet, buffered or taken, by tag.
    pub(crate) unsettled: Unsettled,
    /// The window the consumer runs under (`None`: no `basic.qos`).
    pub(crate) window: Option<u16>,
    /// Acks of the open channel settled here and not sent yet (see [`crate::acks`]).
    pub(crate) held_acks: HeldAcks,
    /// A task is waiting to send the held acks once they are due.
    pub(crate) held_acks_timer: bool,
}

impl SubState {
    /// Removes `acked` from the unsettled deliveries and says which ack frames to send now
    /// (every held one when `flush`); the rest stay held.
    pub(crate) fn plan_acks(&mut self, acked: &[u64], flush: bool) -> AckFrames {
        for &tag in acked {
            self.unsettled.remove(tag);
        }
        let low = self.unsettled.lowest().unwrap_or(u64::MAX);
        let limit = hold_limit(self.window);
        self.held_acks
            .plan(acked.iter().copied(), low, limit, Instant::now(), flush)
    }
}
