//! The chaos tests: real `chaos-worker` processes on every durable broker, faults injected
//! while they drain, every job id accounted for (see `hopper_chaos::checker`). Bounded by
//! default; `HOPPER_CHAOS_FULL=1` for the full form (see the crate's README). Each test
//! prints its row of figures: run with `-- --nocapture` to see them.

mod chaos {
    mod faults;
    mod kills;
    mod partition;
    mod steady;
    mod support;
}
