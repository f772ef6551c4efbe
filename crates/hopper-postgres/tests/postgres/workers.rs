//! Workers on the real server, in real time: the shared cases of `hopper_testkit::workers`.

use std::sync::Arc;

use hopper_core::Broker;
use hopper_postgres::{PgBroker, PgOptions};
use hopper_testkit::workers::{self, Connect};

use super::support::{broker_with, url};

/// Opens another broker on the test's schema, as another process would.
pub(crate) fn connect(schema: String) -> Connect {
    Arc::new(move || {
        let options = PgOptions::default().schema(schema.clone());
        Box::pin(async move {
            Arc::new(
                PgBroker::connect_with(&url(), options)
                    .await
                    .expect("connect"),
            ) as Arc<dyn Broker>
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_batch_has_its_jobs_run_by_another_after_the_lease() {
    let (broker, pg) = broker_with(|o| o).await;
    workers::dead_worker_jobs_run_after_the_lease(broker, connect(pg.schema().to_owned())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_runtimes_drain_ten_thousand_jobs_once_each() {
    let (broker, pg) = broker_with(|o| o).await;
    workers::two_runtimes_drain_once_each(broker, connect(pg.schema().to_owned()), 10_000).await;
}
