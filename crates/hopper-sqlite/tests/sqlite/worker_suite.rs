//! The worker-level suite (`hopper_testkit::worker_suite!`), each case on a file of its own,
//! in real time (a paused clock would run ahead while the runtime waits on the broker's
//! thread). The crash cases' doomed worker opens the same file on a broker of its own.

hopper_testkit::worker_suite!(super::support::worker_target);
