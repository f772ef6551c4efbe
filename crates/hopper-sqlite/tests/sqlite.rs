//! hopper-sqlite's tests: the shared broker suite with each case on a file of its own, then
//! what only a file can show: jobs surviving a reopen, two brokers sharing one file, group
//! commit isolating a failing command, refusals at open, migrations of older files, a
//! pause made through one broker stopping the workers of another, unique keys: a table
//! jobs without one never reach, swept by worker reports, and ordering keys: an index jobs
//! without one never reach, and blocked jobs as listings show them; rate limits: one
//! window shared by brokers in several processes, kept through rows no broker wrote; groups:
//! one completion job per group however many brokers of the file settle its members.

mod sqlite {
    mod admin_migration;
    mod durability;
    mod glance;
    mod group_commit;
    mod groups;
    mod groups_migration;
    mod history;
    mod listing;
    mod open;
    mod ordering;
    mod ordering_migration;
    mod pausing;
    mod ranges;
    mod rate;
    mod rate_keys;
    mod rate_migration;
    mod registry_migration;
    mod schedules_migration;
    mod sharing;
    mod suite;
    pub mod support;
    mod unique;
    mod unique_key_migration;
    mod unique_migration;
    mod unreadable;
    mod worker_suite;
    mod workers;
}
