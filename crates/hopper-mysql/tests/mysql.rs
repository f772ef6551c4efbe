//! The MySQL / MariaDB broker against the real server on 127.0.0.1:3306 (override with
//! `HOPPER_TEST_MYSQL_URL`). Every test works in a database of its own, dropped afterwards:
//! the shared behaviour suite, migrations and refusals, the database clock, what an idle
//! broker asks, the wake poller, query plans (the operator calls' too), error histories,
//! worker reports on the database clock, unique keys and the pruning of their holds,
//! ordering keys (racing brokers, the pruning of key rows, their statements and plans),
//! rate limits (brokers of two processes sharing a window, windows written wrong, the
//! migration that adds them), rate limits per key (racing brokers, deep backlogs, the
//! bound on moves, windows forgotten, the migration), and workers on the real server (a crash mid-batch, two
//! runtimes sharing a queue, a queue paused by another process).

mod mysql {
    mod admin_plans;
    mod clock;
    mod groups;
    mod history;
    mod idle;
    mod killed;
    mod listing_scale;
    mod migrations;
    mod ordering;
    mod ordering_schema;
    mod partition;
    mod pausing;
    mod plans;
    mod ranges;
    mod rate;
    mod rate_cost;
    mod rate_keys;
    mod registry;
    mod settling;
    mod stats_scale;
    mod suite;
    pub mod support;
    mod unique;
    mod unreadable;
    mod wakeups;
    mod worker_suite;
    mod workers;
}
