//! Hopper's RabbitMQ broker (`amqp://…`, AMQP 0-9-1 through lapin). Not for direct use:
//! depend on `hopper` with the `amqp` feature.
//!
//! RabbitMQ pushes deliveries under a window (`basic.qos`); Hopper's worker takes them
//! from what has arrived ([`Capabilities::pushed`](hopper_core::Capabilities::pushed)), so
//! concurrency, batch handlers, grouped settlements, graceful shutdown and statistics work
//! as on every other broker. Each subscription has its own channel and consumer; an
//! adaptive window (`Prefetch::Auto`) re-sends `basic.qos` as it changes. Retries and
//! delayed jobs wait on the server in TTL'd retry queues, so a crash loses no delay.
//! Publishing is confirmed and pipelined. A lost connection is re-opened with backoff, and a
//! delivery of the old channel is never acknowledged on the new one. The wire format, for
//! producers in other languages, is in `docs/amqp.md`.
//!
//! # Layout
//! - [`broker`]: [`AmqpBroker`], the [`Broker`](hopper_core::Broker) implementation:
//!   enqueue, fetch from the pushed buffers, grouped settlement, counts, purge, and the
//!   operator calls (statistics, dead letters re-driven, pauses); publishing, fetch,
//!   settlement, re-drives, pauses and the admin calls each have a submodule.
//! - [`options`]: [`AmqpOptions`] and [`QueueSettings`]: default window, queue kinds,
//!   dead-letter exchanges, declarations, confirms, reconnection; URL settings.
//! - [`topology`]: the queues Hopper declares: work and dead-letter queues on request,
//!   retry queues always, and the retry buckets; the names operators' pauses use.
//! - [`control`]: pausing a queue for every worker: the flag queue, and the announcements
//!   running workers listen to.
//! - [`wire`]: the message format: properties, headers, ids.
//! - `subscription`: one channel and consumer per queue and the task feeding its buffer
//!   (its state, task, consumer, buffer and ack sending in submodules of their own);
//!   `acks`: which acknowledgements it sends now and which it holds for one `multiple`
//!   frame; `conn`: the connection, its reconnection and the confirm channels.

mod acks;
pub mod broker;
mod conn;
pub mod control;
pub mod options;
mod subscription;
pub mod topology;
mod unsettled;
pub mod wire;

pub use broker::AmqpBroker;
pub use options::{AmqpOptions, MAX_WINDOW, QueueKind, QueueSettings};
