//! Settlement: the settlements of a batch are grouped by the channel their deliveries came
//! on (the generation in each job id). On each channel releases and rejects go at once,
//! retries, snoozes and dead letters as confirmed copies first, then every acknowledgement
//! grouped (see `crate::acks`); one for a channel that is gone is fenced.
//!
//! A snooze is a retry that charges nothing: its copy goes to the same retry queue a retry
//! of that delay would (the delay rounded up to its bucket, see `crate::topology`), with
//! [`ATTEMPT`](crate::wire::ATTEMPT) one lower than the delivery's attempt, so the next
//! delivery comes back on the attempt this one had, and with no error of its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use hopper_core::{JobId, Outcome, Result, SettleReport, Settlement};
use lapin::options::{BasicNackOptions, BasicRejectOptions};

use super::AmqpBroker;
use super::publish::{Outgoing, Published};
use crate::subscription::{Subscription, queue_frame, send_acks};
use crate::topology::{dead_queue, retry_bucket};
use crate::wire;
use crate::wire::now_ms;

/// A delivery going back to its queue later, as a copy: a retry or a snooze.
struct Later {
    id: JobId,
    tag: u64,
    delay: std::time::Duration,
    /// Attempts the copy says were charged: the delivery's own for a retry, one fewer for
    /// a snooze.
    charged: u32,
    /// The copy's last error: this attempt's for a retry, the one carried for a snooze.
    error: Option<String>,
    job: hopper_core::Job,
    message_id: Option<String>,
}

impl AmqpBroker {
    /// [`Broker::settle`](hopper_core::Broker::settle): each channel's settlements on it,
    /// those of a channel that is gone fenced.
    pub(super) async fn settle_by_channel(
        &self,
        settlements: Vec<Settlement>,
    ) -> Result<SettleReport> {
        let mut report = SettleReport::default();
        let mut by_generation: BTreeMap<u64, Vec<(Settlement, u64)>> = BTreeMap::new();
        for s in settlements {
            let (generation, tag) = wire::split_id(s.job);
            by_generation.entry(generation).or_default().push((s, tag));
        }
        let mut failed = None;
        for (generation, items) in by_generation {
            match self.inner.sub_of_generation(generation) {
                Some(sub) => {
                    if let Err(e) = self.settle_on(&sub, items, &mut report).await {
                        failed = Some(e);
                    }
                }
                None => report.fenced.extend(items.iter().map(|(s, _)| s.job)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Settles one subscription's deliveries: releases and rejects at once, retries,
    /// snoozes and dead letters by a confirmed copy first, then every acknowledgement
    /// grouped.
    async fn settle_on(
        &self,
        sub: &Arc<Subscription>,
        items: Vec<(Settlement, u64)>,
        report: &mut SettleReport,
    ) -> Result<()> {
        let _serial = sub.settling.lock().await;
        let mut acks: Vec<(JobId, u64)> = Vec::new();
        let mut releases = Vec::new();
        let mut rejects = Vec::new();
        let mut copies: Vec<(JobId, u64, Outgoing, bool)> = Vec::new();
        let (channel, generation) = {
            let st = sub.state();
            (st.channel.clone(), st.generation)
        };
        let Some(channel) = channel else {
            report.fenced.extend(items.iter().map(|(s, _)| s.job));
            return Ok(());
        };
        let mut retry_targets = Vec::new();
        {
            let st = sub.state();
            for (s, tag) in items {
                let (gen_of, _) = wire::split_id(s.job);
                let Some(held) = st.unsettled.get(tag).filter(|_| gen_of == generation) else {
                    report.fenced.push(s.job);
                    continue;
                };
                match s.outcome {
                    Outcome::Ack | Outcome::Cancel => acks.push((s.job, tag)),
                    Outcome::Release => releases.push((s.job, tag)),
                    Outcome::Retry { delay, error, .. } => {
                        let job = held.copy.to_job(&sub.queue);
                        retry_targets.push(Later {
                            id: s.job,
                            tag,
                            delay,
                            charged: job.attempt,
                            error: Some(error),
                            job,
                            message_id: held.message_id.clone(),
                        });
                    }
                    Outcome::Snooze { delay } => {
                        // A retry that gives the attempt back and records nothing: the
                        // copy says one attempt fewer was charged, so the next delivery
                        // carries the attempt this one did, and keeps the error an earlier
                        // attempt left, if any.
                        let job = held.copy.to_job(&sub.queue);
                        retry_targets.push(Later {
                            id: s.job,
                            tag,
                            delay,
                            charged: job.attempt.saturating_sub(1),
                            error: held.error.as_deref().map(str::to_owned),
                            job,
                            message_id: held.message_id.clone(),
                        });
                    }
                    Outcome::DeadLetter { error } => {
                        match self.inner.topology.dead_letter_target(&sub.queue) {
                            Some((exchange, routing_key)) => {
                                let job = held.copy.to_job(&sub.queue);
                                let props = wire::copy_properties(
                                    &job,
                                    held.message_id.as_deref(),
                                    None,
                                    job.attempt,
                                    Some(&error),
                                );
                                let mut headers = props.headers().clone().unwrap_or_default();
                                headers.insert(
                                    wire::QUEUE.into(),
                                    lapin::types::AMQPValue::LongString(
                                        sub.queue.as_bytes().to_vec().into(),
                                    ),
                                );
                                let props = props.with_headers(headers);
                                copies.push((
                                    s.job,
                                    tag,
                                    Outgoing {
                                        exchange,
                                        routing_key,
                                        payload: job.payload,
                                        properties: props,
                                    },
                                    true,
                                ));
                            }
                            None => rejects.push((s.job, tag, error)),
                        }
                    }
                }
            }
        }
        // Retry and snooze copies wait in a retry queue (declared on first use), their
        // delay rounded up to its bucket as an enqueue's is, or go straight back.
        for later in retry_targets {
            let Later {
                id: job_id,
                tag,
                delay,
                charged,
                error,
                job,
                message_id,
            } = later;
            let due = now_ms() + delay.as_millis() as i64;
            let (routing_key, run_at) = match retry_bucket(delay) {
                Some(ms) => (
                    self.inner
                        .topology
                        .ensure_retry(&self.inner.link, &sub.queue, ms)
                        .await?,
                    Some(due),
                ),
                None => (sub.queue.clone(), None),
            };
            let props = wire::copy_properties(
                &job,
                message_id.as_deref(),
                run_at,
                charged,
                error.as_deref(),
            );
            copies.push((
                job_id,
                tag,
                Outgoing {
                    exchange: String::new(),
                    routing_key,
                    payload: job.payload,
                    properties: props,
                },
                false,
            ));
        }

        // Releases and rejects: one frame each, queued without waiting for their writes (see
        // `queue_frame`). The channel may have been replaced while retry copies were
        // published: its tags are then another channel's, and the frames below fail on the
        // closed one.
        {
            let mut st = sub.state();
            let same_channel = st.generation == generation;
            for (_, tag) in releases.iter().filter(|_| same_channel) {
                st.unsettled.remove(*tag);
            }
            for (_, tag, _) in rejects.iter().filter(|_| same_channel) {
                st.unsettled.remove(*tag);
            }
        }
        for (id, tag) in &releases {
            let requeue = BasicNackOptions {
                multiple: false,
                requeue: true,
            };
            match queue_frame(channel.basic_nack(*tag, requeue)) {
                Ok(()) => report.applied += 1,
                Err(_) => report.fenced.push(*id),
            }
        }
        for (id, tag, error) in &rejects {
            tracing::error!(queue = %sub.queue, job = %id, %error,
                "dead letter rejected without requeue: the queue's own dead-letter policy decides \
                 where it goes, and this error is not kept with it (configure a dead-letter \
                 exchange, or declare topology, to keep it)");
            match queue_frame(channel.basic_reject(*tag, BasicRejectOptions { requeue: false })) {
                Ok(()) => report.applied += 1,
                Err(_) => report.fenced.push(*id),
            }
        }

        // Copies: confirmed before their originals are acknowledged.
        let mut failed = None;
        if !copies.is_empty() {
            // The `.dead` queue Hopper declares, when a copy that comes back unroutable may
            // wait for the settlement's retry: only if the queue was taken for declared
            // here, so the retry declares it first. Declared just now, or not declarable,
            // an unroutable copy is rejected at once, as without topology.
            let mut own_dead = None;
            if self.inner.topology.declares() && copies.iter().any(|c| c.3) {
                let known = self.inner.topology.is_declared(&sub.queue);
                match self
                    .inner
                    .topology
                    .ensure_queue(&self.inner.link, &sub.queue)
                    .await
                {
                    Ok(()) if known => own_dead = Some(dead_queue(&sub.queue)),
                    Ok(()) => {}
                    Err(e) => tracing::error!(queue = %sub.queue, error = %e.chain(),
                        "cannot declare the queue and its dead-letter queue again"),
                }
            }
            let (meta, outgoing): (Vec<_>, Vec<_>) = copies
                .into_iter()
                .map(|(id, tag, o, dead)| {
                    let to_own = dead
                        && o.exchange.is_empty()
                        && own_dead.as_deref() == Some(o.routing_key.as_str());
                    ((id, tag, dead, to_own), o)
                })
                .unzip();
            let results = self.publish(&outgoing).await?;
            for ((id, tag, dead, to_own), r) in meta.into_iter().zip(results) {
                // A copy to the `.dead` queue Hopper declares, which was deleted: kept for
                // the settlement's retry, by which the queue is declared again. Rejected,
                // the message would follow the queue's dead-letter route to that same
                // missing queue and be dropped.
                let retry_later = to_own && matches!(r, Published::Unroutable(_));
                match r.into_result() {
                    Ok(()) => acks.push((id, tag)),
                    Err(e) if dead && !retry_later => {
                        tracing::error!(queue = %sub.queue, job = %id, error = %e.chain(),
                            "dead-letter copy refused; rejecting the message instead");
                        // Only on the channel the batch was read against: after a
                        // reconnect the same tag names the new channel's delivery.
                        {
                            let mut st = sub.state();
                            if st.generation == generation {
                                st.unsettled.remove(tag);
                            }
                        }
                        match channel
                            .basic_reject(tag, BasicRejectOptions { requeue: false })
                            .await
                        {
                            Ok(()) => report.applied += 1,
                            Err(_) => report.fenced.push(id),
                        }
                    }
                    Err(e) => failed = Some(e),
                }
            }
        }

        // Acknowledgements (see `acks`): those below the lowest delivery still unsettled
        // go in one `multiple` frame; those above it are held until it settles, so a
        // delivery whose handler has not finished is never covered. Held acks count as
        // applied: the frame that carries them is this channel's to send.
        // Only on the channel the batch was read against: after a reconnect (possible while
        // copies were published) the same tags name the new channel's deliveries.
        let tags: Vec<u64> = acks.iter().map(|&(_, tag)| tag).collect();
        let frames = {
            let mut st = sub.state();
            (st.generation == generation).then(|| st.plan_acks(&tags, false))
        };
        match frames {
            Some(frames) if send_acks(&channel, &frames).is_ok() => {
                report.applied += acks.len();
            }
            _ => report.fenced.extend(acks.iter().map(|&(id, _)| id)),
        }
        sub.send_held_acks_when_due();
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
