//! Behaviour of the worker runtime and the memory broker. Timing-dependent cases run under
//! tokio's paused clock, so job times are exact and the figures asserted are deterministic.

mod core {
    mod ahead;
    mod config;
    mod dispatch;
    mod enqueue;
    mod fetching;
    mod inline;
    mod metrics;
    mod periodic;
    mod pushed;
    mod renewal;
    mod safety;
    mod suite;
    pub mod support;
    mod timeout;
    mod top_up;
    mod topics;
    mod worker_suite;
}
