//! The shared behaviour suite. Most of its cases fetch right after enqueueing and compare
//! ids, which a pushed broker does not offer; they print why they skip. The behaviour they
//! stand for is proved through workers in the other modules of this binary.

use std::sync::Arc;

use hopper_amqp::{AmqpBroker, AmqpOptions};
use hopper_core::Broker;
use hopper_testkit::WithCleanup;

use super::support::{Cleanup, url};

/// A broker declaring topology; the suite's fixed queue names are deleted afterwards.
async fn fresh_broker() -> Arc<dyn Broker> {
    let broker = AmqpBroker::connect_with(&url(), AmqpOptions::new().declare(true))
        .await
        .expect("connect to RabbitMQ");
    let names = ["q", "x", "y", "a", "b", "other", "good", "A-z_0.9:x"];
    let cleanups: Vec<Cleanup> = names.iter().map(|n| Cleanup::for_queue(n)).collect();
    Arc::new(WithCleanup::new(Arc::new(broker), move || drop(cleanups)))
}

hopper_testkit::broker_suite!(fresh_broker);
