//! Workers on the real server, in real time: the shared cases of `hopper_testkit::workers`.

use std::sync::Arc;

use hopper_core::Broker;
use hopper_mysql::MySqlBroker;
use hopper_testkit::workers::{self, Connect};

use super::support::broker_with;

/// Opens another broker on the test's database, as another process would.
pub(crate) fn connect(url: String) -> Connect {
    Arc::new(move || {
        let url = url.clone();
        Box::pin(async move {
            Arc::new(MySqlBroker::connect(&url).await.expect("connect")) as Arc<dyn Broker>
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_batch_has_its_jobs_run_by_another_after_the_lease() {
    let (broker, url) = broker_with(|o| o).await;
    workers::dead_worker_jobs_run_after_the_lease(broker, connect(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_runtimes_drain_ten_thousand_jobs_once_each() {
    let (broker, url) = broker_with(|o| o).await;
    workers::two_runtimes_drain_once_each(broker, connect(url), 10_000).await;
}
