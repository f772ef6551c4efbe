//! The worker-level suite (`hopper_testkit::worker_suite!`) on the memory broker. It is in
//! process, so the cases run under the paused clock, except the crash cases, whose doomed
//! worker dies on a runtime of its own. "Another connection" is the same broker: a crash
//! there is the doomed worker's runtime dropped with everything it held unsettled.

use std::sync::Arc;

use hopper_core::{Broker, Clock, MemoryBroker};
use hopper_testkit::worker_cases::Target;

async fn target() -> Target {
    let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::with_clock(Clock::tokio()));
    let same = broker.clone();
    Target {
        broker,
        connect: Arc::new(move || {
            let same = same.clone();
            Box::pin(async move { same })
        }),
        queue: "q".into(),
    }
}

hopper_testkit::worker_suite!(target);
