//! The `hopper` command end to end: the demo, load runs on memory, SQLite and the servers,
//! the bench's workloads, enqueue from the command line, rate limits and groups, bad input.

mod bench;
mod cron;
mod demo;
mod enqueue;
mod errors;
mod features;
mod load;
mod metrics;
mod operate;
mod serve;
mod servers;
mod support;
mod work;
