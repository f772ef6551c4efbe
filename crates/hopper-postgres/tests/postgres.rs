//! The PostgreSQL broker against the real server on 127.0.0.1 (override with
//! `HOPPER_TEST_POSTGRES_URL`). Every test works in a schema of its own, dropped afterwards.

mod postgres {
    mod crash;
    mod glance_scale;
    mod groups;
    mod history;
    mod killed;
    mod list_plans;
    mod migrations;
    mod ordering;
    mod ordering_locks;
    mod partition;
    mod pausing;
    mod plans;
    mod ranges;
    mod rate;
    mod rate_keys;
    mod suite;
    pub mod support;
    mod transactions;
    mod unique;
    mod unreadable;
    mod wakeups;
    mod worker_suite;
    mod workers;
}
