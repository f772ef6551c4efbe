//! The RabbitMQ broker against the real server on 127.0.0.1:5672 (override with
//! `HOPPER_TEST_AMQP_URL`). Every test works on queues of its own (`<prefix>_<pid>_<n>`),
//! deleted afterwards even when it fails; none mocks RabbitMQ.

mod amqp {
    mod acks;
    mod admin;
    mod batches;
    mod faults;
    mod interop;
    mod retries;
    mod snooze;
    mod subscriptions;
    mod suite;
    pub mod support;
    mod windows;
    mod worker_suite;
}
