//! The broker behaviour suite, run against the memory broker.

use std::sync::Arc;

use hopper_core::{Broker, Clock, MemoryBroker};

async fn fresh() -> Arc<dyn Broker> {
    Arc::new(MemoryBroker::with_clock(Clock::tokio()))
}

hopper_testkit::broker_suite!(fresh);

/// The memory broker's own bookkeeping, past what the suite asks of every broker.
mod memory {
    use std::time::Duration;

    use hopper_core::{Broker, Clock, MemoryBroker, Outcome, Settlement};
    use hopper_testkit::helpers::{enqueue_n, fetch};

    const TTL: Duration = Duration::from_secs(30);

    fn broker() -> std::sync::Arc<dyn Broker> {
        std::sync::Arc::new(MemoryBroker::with_clock(Clock::tokio()))
    }

    /// One settlement batch mixing two fetches' jobs releases each lease exactly as far
    /// as its own jobs settled: the lease whose jobs all settled is gone (renewing it
    /// reports it lost), the other, with one job still out, renews.
    #[tokio::test(start_paused = true)]
    async fn a_batch_mixing_leases_counts_each_lease_its_own_jobs() {
        let broker = broker();
        enqueue_n(&broker, "q", 5).await;
        let a = fetch(&broker, "q", 2, TTL).await;
        let b = fetch(&broker, "q", 3, TTL).await;
        assert_eq!((a.jobs.len(), b.jobs.len()), (2, 3));
        let batch = vec![
            Settlement::ack(&a.jobs[0]),
            Settlement::ack(&b.jobs[0]),
            Settlement::ack(&a.jobs[1]),
            Settlement::ack(&b.jobs[1]),
        ];
        let report = broker.settle(batch).await.expect("settle");
        assert_eq!((report.applied, report.fenced.len()), (4, 0));
        let lost = broker.renew(&[a.lease, b.lease], TTL).await.expect("renew");
        assert_eq!(
            lost,
            vec![a.lease],
            "a's two jobs settled, b's third is out"
        );
        let counts = broker.counts("q").await.expect("counts");
        assert_eq!((counts.leased, counts.pending), (1, 0));
        // b's last job still settles under its lease, which then goes too.
        let report = broker
            .settle(vec![Settlement::ack(&b.jobs[2])])
            .await
            .expect("settle");
        assert_eq!(report.applied, 1);
        let lost = broker.renew(&[b.lease], TTL).await.expect("renew");
        assert_eq!(lost, vec![b.lease]);
    }

    /// A queue purged and used again: a job held from it is counted and named under it, and
    /// comes back to it on release, with another queue's names unchanged.
    #[tokio::test(start_paused = true)]
    async fn a_queue_made_again_after_a_purge_keeps_its_name() {
        let broker = broker();
        enqueue_n(&broker, "first", 1).await;
        enqueue_n(&broker, "again", 2).await;
        assert_eq!(broker.purge("again").await.expect("purge"), 2);
        enqueue_n(&broker, "again", 2).await;
        let held = fetch(&broker, "again", 1, TTL).await;
        let job = &held.jobs[0];
        assert_eq!(job.queue, "again");
        let rec = broker.job(job.id).await.expect("job()").expect("held");
        assert_eq!(rec.job.queue, "again");
        assert_eq!(broker.counts("again").await.expect("counts").leased, 1);
        assert_eq!(broker.counts("first").await.expect("counts").leased, 0);
        assert_eq!(broker.counts("never").await.expect("counts").leased, 0);
        let release = Settlement {
            job: job.id,
            lease: held.lease,
            outcome: Outcome::Release,
        };
        broker.settle(vec![release]).await.expect("settle");
        let counts = broker.counts("again").await.expect("counts");
        assert_eq!((counts.pending, counts.leased), (2, 0));
        let first = fetch(&broker, "first", 5, TTL).await;
        assert_eq!(first.jobs.len(), 1);
        assert_eq!(first.jobs[0].queue, "first");
    }
}
