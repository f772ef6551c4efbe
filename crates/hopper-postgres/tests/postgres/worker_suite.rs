//! The worker-level suite (`hopper_testkit::worker_suite!`), each case in a schema of its
//! own, in real time with the brokers' defaults (the database's clock, LISTEN/NOTIFY): a
//! paused clock would run ahead while the runtime waits on the server. The crash cases'
//! doomed worker connects to the same schema on a broker of its own.

use hopper_testkit::worker_cases::Target;

use super::support::broker_with;
use super::workers::connect;

async fn target() -> Target {
    let (broker, pg) = broker_with(|o| o).await;
    Target {
        broker,
        connect: connect(pg.schema().to_owned()),
        queue: "q".into(),
    }
}

hopper_testkit::worker_suite!(target);
