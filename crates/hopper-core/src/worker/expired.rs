//! Leases a worker gives up on its own: see [`Expired`].

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::job::{IdSet, LeaseId};

/// Leases this worker gave up because no renewal reached the broker within their time:
/// the broker may already have given their jobs to another worker, so handlers still
/// running under one are stopped (docs/design.md, "Leases and fencing"). Only workers on
/// brokers in another process have one.
#[derive(Debug)]
pub(crate) struct Expired {
    leases: Mutex<IdSet<LeaseId>>,
    changed: watch::Sender<u64>,
    pub(crate) ttl: Duration,
}

impl Expired {
    pub(crate) fn new(ttl: Duration) -> Self {
        Expired {
            leases: Mutex::default(),
            changed: watch::channel(0).0,
            ttl,
        }
    }

    /// Gives up `lease`: handlers running under it stop at their next `.await`.
    pub(crate) fn expire(&self, lease: LeaseId) {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(lease);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Returns once any of `leases` is given up.
    pub(crate) async fn any(&self, leases: &[LeaseId]) {
        let mut changed = self.changed.subscribe();
        loop {
            {
                let given_up = self.leases.lock().unwrap_or_else(|e| e.into_inner());
                if leases.iter().any(|l| given_up.contains(l)) {
                    return;
                }
            }
            if changed.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}
