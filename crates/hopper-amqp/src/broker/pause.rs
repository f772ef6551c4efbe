//! Pausing and resuming a queue for every worker on the virtual host (`crate::control`):
//! the flag queue first, then the announcement; and this broker's own listener, started
//! with its first subscription.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::Result;
use hopper_core::job::validate_queue_name;
use tokio::sync::oneshot;

use super::AmqpBroker;
use crate::control::{announce, listen, set_flag};

impl AmqpBroker {
    /// [`Broker::set_paused`](hopper_core::Broker::set_paused). The flag changes before the
    /// announcement goes out, so a worker that hears it reads the new flag. Announced even
    /// when the flag was already so: a worker that missed the earlier announcement (its
    /// listener was reconnecting) catches up.
    pub(super) async fn pause_queue(&self, queue: &str, paused: bool) -> Result<bool> {
        validate_queue_name(queue)?;
        let changed = set_flag(&self.inner.link, queue, paused).await?;
        announce(&self.inner.link, queue, paused).await?;
        Ok(changed)
    }

    /// Starts listening for pause announcements, once per broker, and waits (a while at
    /// most) for the listener to bind: a subscription opened after that hears every later
    /// announcement, so the flag it reads when it opens needs no second look. One opened
    /// before (the bind failed or was slow) reads its flag again once the listener binds.
    pub(super) async fn ensure_listener(&self) {
        let bound = {
            let mut listener = self
                .inner
                .listener
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if listener.is_some() {
                return;
            }
            let (tx, rx) = oneshot::channel();
            let task = listen(
                self.inner.link.clone(),
                Arc::clone(&self.inner.signals),
                Some(tx),
            );
            *listener = Some(tokio::spawn(task));
            rx
        };
        let _ = tokio::time::timeout(LISTENER_WAIT, bound).await;
    }
}

/// The longest a first subscription waits for the pause listener to bind.
const LISTENER_WAIT: Duration = Duration::from_secs(5);
