//! Worker runtimes sharing one file, in real time: the shared cases of
//! `hopper_testkit::workers`, with each worker on a broker (and thread) of its own.

use std::path::PathBuf;
use std::sync::Arc;

use hopper_core::Broker;
use hopper_sqlite::SqliteBroker;
use hopper_testkit::workers::{self, Connect};

use super::support::TempDb;

pub(crate) fn connect(path: PathBuf) -> Connect {
    Arc::new(move || {
        let path = path.clone();
        Box::pin(async move {
            Arc::new(SqliteBroker::open(&path).await.expect("open")) as Arc<dyn Broker>
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_batch_has_its_jobs_run_by_another_after_the_lease() {
    let db = TempDb::new("dead-worker");
    let broker = connect(db.path().to_owned())().await;
    workers::dead_worker_jobs_run_after_the_lease(broker, connect(db.path().to_owned())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_runtimes_drain_ten_thousand_jobs_once_each() {
    let db = TempDb::new("two-runtimes");
    let broker = connect(db.path().to_owned())().await;
    workers::two_runtimes_drain_once_each(broker, connect(db.path().to_owned()), 10_000).await;
}
