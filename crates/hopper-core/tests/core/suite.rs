//! The broker behaviour suite, run against the memory broker.

use std::sync::Arc;

use hopper_core::{Broker, Clock, MemoryBroker};

async fn fresh() -> Arc<dyn Broker> {
    Arc::new(MemoryBroker::with_clock(Clock::tokio()))
}

hopper_testkit::broker_suite!(fresh);
