//! The memory broker's live workers and throughput buckets, behind a lock of their own so
//! that reports never wait on the job state's lock.

use std::collections::{BTreeMap, HashMap};

use super::MemoryBroker;
use crate::admin::Throughput;
use crate::job::Millis;
use crate::registry::{Bucket, KEPT, WorkerBeat, WorkerInfo, bucket_of};

#[derive(Debug, Default)]
pub(super) struct Registry {
    workers: HashMap<String, WorkerInfo>,
    /// Per queue, per bucket start.
    buckets: HashMap<String, BTreeMap<Millis, Throughput>>,
}

impl MemoryBroker {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn beat(&self, beat: &WorkerBeat) {
        let now = self.inner.clock.now_millis();
        let mut reg = self.registry();
        let mut worker = beat.worker.clone();
        worker.heartbeat_at = now;
        worker.expires_at = now.saturating_add(beat.ttl_millis());
        reg.workers.insert(worker.id.clone(), worker);
        reg.workers.retain(|_, w| w.expires_at > now);
        let bucket = bucket_of(now);
        let oldest = now - KEPT.as_millis() as Millis;
        for (queue, counts) in &beat.settled {
            let kept = reg.buckets.entry(queue.clone()).or_default();
            kept.entry(bucket).or_default().add(counts);
            while kept.first_key_value().is_some_and(|(&at, _)| at < oldest) {
                kept.pop_first();
            }
        }
    }

    pub(super) fn forget(&self, worker: &str) -> bool {
        self.registry().workers.remove(worker).is_some()
    }

    pub(super) fn live_workers(&self) -> Vec<WorkerInfo> {
        let now = self.inner.clock.now_millis();
        let reg = self.registry();
        let mut live: Vec<WorkerInfo> = reg
            .workers
            .values()
            .filter(|w| w.expires_at > now)
            .cloned()
            .collect();
        live.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
        live
    }

    pub(super) fn buckets(&self, queue: &str) -> Vec<Bucket> {
        let oldest = bucket_of(self.inner.clock.now_millis()) - 3_600_000;
        let reg = self.registry();
        let Some(kept) = reg.buckets.get(queue) else {
            return Vec::new();
        };
        kept.range(oldest + 1..)
            .map(|(&at, &counts)| Bucket { at, counts })
            .collect()
    }
}
