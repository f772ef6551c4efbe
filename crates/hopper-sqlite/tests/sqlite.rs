//! hopper-sqlite's tests: the shared broker suite with each case on a file of its own, then
//! what only a file can show: jobs surviving a reopen, two brokers sharing one file, group
//! commit isolating a failing command, and refusals at open.

mod sqlite {
    mod durability;
    mod group_commit;
    mod open;
    mod ranges;
    mod sharing;
    mod suite;
    pub mod support;
    mod unreadable;
    mod worker_suite;
    mod workers;
}
