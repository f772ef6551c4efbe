//! The subscription task: it opens the channel and consumer, moves what arrives into the
//! buffer and obeys the handle's commands; after a loss it reopens with backoff.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use hopper_core::Result;
use tokio::sync::{mpsc, oneshot, watch};

use super::Subscription;
use super::buffer::ready_deliveries;
use super::consumer::{open, rewindow};
use crate::conn::SharedLink;

pub(super) enum Cmd {
    Window(Option<u16>, oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<()>),
}

/// The subscription task: open, move deliveries into the buffer, obey commands; after a
/// loss, reopen with backoff under the same window (a new generation).
pub(super) async fn run(
    sub: Arc<Subscription>,
    link: SharedLink,
    wake: watch::Sender<u64>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    mut ready: Option<oneshot::Sender<Result<()>>>,
) {
    let (min, max) = link.backoff;
    let mut wait = min;
    let mut seq = 0u64;
    loop {
        match open(&sub, &link, &mut seq).await {
            Ok((channel, mut consumer, generation)) => {
                wait = min;
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Ok(()));
                }
                loop {
                    tokio::select! {
                        d = consumer.next() => {
                            let end = match d {
                                Some(Ok(d)) => {
                                    // What else already arrived goes in the same push: one
                                    // lock and one wake-up of the worker for all of it.
                                    let (ready, end) = ready_deliveries(&mut consumer, d);
                                    sub.push_all(ready, generation, &wake);
                                    end
                                }
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
