//! Rate limits per key on PostgreSQL, beyond the shared suite: brokers on separate pools
//! race on one queue's key windows and claim no more than each key's limit between them;
//! a batch mixing rate keys with the other keys or groups is refused by name.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Error, NewJob, RateLimit};
use hopper_postgres::{PgBroker, PgOptions};
use hopper_testkit::helpers::race_on_rate_keys;

use super::support::{broker_with, url};

const HOUR: Duration = Duration::from_secs(3600);

/// Two brokers, each with its own pool, race 8 claimers in batches of 7 on a queue of 3
/// keys with 40 jobs each and 20 without, limited to 5 an hour per key: 20 are claimed
/// between them, 5 of each key and 5 without, and the other 120 are moved to their keys'
/// next room, an hour on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_on_two_pools_claim_no_more_than_each_keys_limit() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let options = PgOptions::default().schema(pg.schema()).listen(false);
    let other: Arc<dyn Broker> = Arc::new(PgBroker::connect_with(&url(), options).await.unwrap());
    let limit = RateLimit::new(5, HOUR).unwrap().per_key();
    pg.set_rate_limit("q", Some(limit)).await.unwrap();
    race_on_rate_keys(&[broker.clone(), other.clone()]).await;
    let shown = other.queue_stats("q").await.unwrap().rate_limit;
    assert_eq!(shown, Some(limit), "set through the other");
}

/// Rate keys are stored by their own statement, for batches of plain jobs: a batch that
/// also holds a unique or an ordering key or a group is refused, storing nothing.
#[tokio::test]
async fn a_batch_mixing_rate_keys_with_other_keys_is_refused() {
    let (broker, _pg) = broker_with(|o| o.listen(false)).await;
    let rated = || NewJob::new("q", b"x".to_vec()).rate_key("a");
    for other in [
        NewJob::new("q", b"u".to_vec()).unique_key("u"),
        NewJob::new("q", b"o".to_vec()).ordering_key("o"),
        NewJob::new("q", b"g".to_vec()).group("g"),
    ] {
        let refused = broker.enqueue(vec![rated(), other]).await;
        assert!(
            matches!(&refused, Err(Error::NotSupported { what, .. }) if what.contains("rate keys")),
            "{refused:?}"
        );
    }
    assert_eq!(
        broker.counts("q").await.unwrap().pending,
        0,
        "nothing stored"
    );
}
