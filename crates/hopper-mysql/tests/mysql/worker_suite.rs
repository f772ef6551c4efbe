//! The worker-level suite (`hopper_testkit::worker_suite!`), each case in a database of its
//! own, in real time with the broker's defaults (the database's clock, the wake poller): a
//! paused clock would run ahead while the runtime waits on the server. The crash cases'
//! doomed worker connects to the same database on a broker of its own.

use hopper_testkit::worker_cases::Target;

use super::support::broker_with;
use super::workers::connect;

async fn target() -> Target {
    let (broker, url) = broker_with(|o| o).await;
    Target {
        broker,
        connect: connect(url),
        queue: "q".into(),
    }
}

hopper_testkit::worker_suite!(target);
