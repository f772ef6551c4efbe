//! The subscription task: it opens the channel and consumer, moves what arrives into the
//! buffer, obeys the handle's commands and pauses or resumes when its queue's pause flag
//! says so; after a loss it reopens with backoff.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use hopper_core::Result;
use tokio::sync::{mpsc, oneshot, watch};

use super::Subscription;
use super::buffer::ready_deliveries;
use super::consumer::{open, pause, resume, rewindow};
use crate::conn::SharedLink;
use crate::control::{Signals, is_paused};

pub(super) enum Cmd {
    Window(Option<u16>, oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<()>),
}

/// The next delivery of the consumer, or never while paused (no consumer).
async fn next(
    consumer: &mut Option<lapin::Consumer>,
) -> Option<lapin::Result<lapin::message::Delivery>> {
    match consumer {
        Some(c) => c.next().await,
        None => std::future::pending().await,
    }
}

/// The subscription task: open, move deliveries into the buffer, obey commands and pause
/// announcements; after a loss, reopen with backoff under the same window (a new
/// generation).
pub(super) async fn run(
    sub: Arc<Subscription>,
    link: SharedLink,
    wake: watch::Sender<u64>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    mut signals: Signals,
    mut ready: Option<oneshot::Sender<Result<()>>>,
) {
    let (min, max) = link.backoff;
    let mut wait = min;
    let mut seq = 0u64;
    let mut signals_open = true;
    loop {
        match open(&sub, &link, &mut seq, &mut signals).await {
            Ok((channel, mut consumer, generation)) => {
                wait = min;
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Ok(()));
                }
                loop {
                    tokio::select! {
                        d = next(&mut consumer) => {
                            let end = match d {
                                Some(Ok(d)) => match consumer.as_mut() {
                                    Some(running) => {
                                        // What else already arrived goes in the same push:
                                        // one lock and one wake-up of the worker for all.
                                        let (ready, end) = ready_deliveries(running, d);
                                        sub.push_all(ready, generation, &wake);
                                        end
                                    }
                                    None => None, // only a consumer delivers
                                },
                                Some(Err(e)) => Some(Err(e)),
                                None => Some(Ok(())),
                            };
                            match end {
                                None => {}
                                Some(Err(e)) => {
                                    tracing::warn!(queue = %sub.queue, error = %e, "subscription lost; reopening");
                                    break;
                                }
                                Some(Ok(())) => {
                                    tracing::warn!(queue = %sub.queue, "consumer ended by the server; reopening");
                                    break;
                                }
                            }
                        }
                        signal = signals.recv(), if signals_open => {
                            let Some(mut announced) = signal else {
                                signals_open = false; // closing: the command follows
                                continue;
                            };
                            // One look at the flag answers for every announcement so far.
                            while let Ok(next) = signals.try_recv() {
                                announced = next.or(announced);
                            }
                            // The flag is the truth; the announcement stands in only when
                            // the flag cannot be read.
                            let paused = match is_paused(&link, &sub.queue).await {
                                Ok(p) => p,
                                Err(e) => {
                                    tracing::warn!(queue = %sub.queue, error = %e.chain(),
                                        "cannot read the pause flag; following the announcement");
                                    match announced {
                                        Some(p) => p,
                                        None => continue,
                                    }
                                }
                            };
                            let r = if paused {
                                pause(&sub, &channel, &mut consumer, generation, &wake).await
                            } else {
                                resume(&sub, &channel, &mut consumer, generation, &mut seq).await
                            };
                            if let Err(e) = r {
                                tracing::warn!(queue = %sub.queue, error = %e.chain(), "pausing or resuming failed; reopening");
                                break;
                            }
                        }
                        cmd = cmds.recv() => match cmd {
                            Some(Cmd::Window(w, reply)) => {
                                let r = rewindow(&sub, &channel, &mut consumer, w, generation, &wake, &mut seq).await;
                                let failed = r.is_err();
                                if failed {
                                    // Reopen under the new window: the old channel is gone.
                                    sub.state().window = w;
                                }
                                let _ = reply.send(r);
                                if failed {
                                    break;
                                }
                            }
                            Some(Cmd::Close(reply)) => {
                                sub.close_channel(&channel, "unsubscribed").await;
                                let _ = reply.send(());
                                return;
                            }
                            None => {
                                sub.close_channel(&channel, "broker dropped").await;
                                return;
                            }
                        }
                    }
                }
                // The consumer may have ended with the channel still open (cancelled by the
                // server, or a failed re-window): its held acks go out before it closes.
                sub.close_channel(&channel, "reopening").await;
                wake.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(e) => {
                sub.lose();
                tracing::warn!(queue = %sub.queue, error = %e.chain(), retry_in = ?wait, "cannot subscribe");
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Err(e));
                }
                if link.closed.load(Ordering::Acquire) {
                    return;
                }
            }
        }
        // Wait before reopening, still answering commands.
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                cmd = cmds.recv() => match cmd {
                    Some(Cmd::Window(w, reply)) => {
                        sub.state().window = w;
                        let _ = reply.send(Ok(()));
                    }
                    Some(Cmd::Close(reply)) => {
                        let _ = reply.send(());
                        return;
                    }
                    None => return,
                }
            }
        }
        wait = (wait * 2).min(max);
    }
}
