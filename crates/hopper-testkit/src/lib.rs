//! The behaviour every Hopper broker must show, as a suite each broker crate runs against
//! itself (as River's `riverdrivertest.Exercise` does for its drivers), and the helpers
//! those cases use.
//!
//! A broker crate calls [`broker_suite!`] once with a factory that builds a fresh, empty
//! broker on [`Clock::tokio`](hopper_core::Clock::tokio); the macro expands to one
//! `#[tokio::test]` per case, so each case passes or fails on its own:
//!
//! ```ignore
//! async fn fresh_broker() -> std::sync::Arc<dyn hopper_core::Broker> {
//!     std::sync::Arc::new(hopper_core::MemoryBroker::with_clock(hopper_core::Clock::tokio()))
//! }
//!
//! mod suite {
//!     hopper_testkit::broker_suite!(super::fresh_broker);
//! }
//! ```
//!
//! Every case but one runs on a current-thread runtime whose clock starts paused, so lease
//! expiry and delays are exact and instant (`tokio::time::advance`); the concurrent-claims
//! case runs on a multi-thread runtime in real time. A case the broker cannot support
//! (see [`Capabilities`](hopper_core::Capabilities)) prints `skipped: <case>: <reason>` to
//! stderr and passes.
//!
//! # Layout
//! - [`cases`]: the cases, one `pub async fn` each, callable on their own, in files by
//!   area (`cases/enqueue.rs`, `fetch.rs`, `leases.rs`, `settle.rs`, `inspect.rs`) and
//!   re-exported as `cases::<name>`.
//! - [`helpers`]: enqueueing, fetching and settling shorthands, and
//!   [`claim_concurrently`](helpers::claim_concurrently).
//! - [`pg_cluster`]: a private PostgreSQL cluster, for tests that crash the server.
//! - [`relay`]: [`Relay`](relay::Relay), a TCP relay that can be cut like a partition.
//! - [`cleanup`]: [`WithCleanup`], a broker that removes its schema or database when
//!   dropped, and [`unique_name`].
//! - [`workers`]: worker-level cases for brokers shared by several processes.
//! - [`worker_cases`]: the worker-level suite, a real `Worker` on each broker, in files by
//!   area (`worker_cases/run.rs`, `stop.rs`, `batch.rs`, `control.rs`).
//! - [`broker_suite!`] and [`worker_suite!`]: the macros that turn the cases into tests.

pub mod cases;
pub mod cleanup;
pub mod helpers;
pub mod pg_cluster;
pub mod relay;
pub mod worker_cases;
pub mod workers;

pub use cleanup::{WithCleanup, unique_name};

#[doc(hidden)]
pub mod __private {
    pub use tokio;
}

/// Expands to one test per case of [`cases`], each on a fresh broker from `$factory`.
///
/// `$factory` is anything callable with no arguments that returns a future of
/// `Arc<dyn Broker>`: the path of an `async fn`, or a closure returning an async block. It
/// runs inside each test's runtime, after the clock is paused, so it can and must build the
/// broker on [`Clock::tokio`](hopper_core::Clock::tokio). Call the macro inside a module of
/// its own: the tests take the cases' names.
#[macro_export]
macro_rules! broker_suite {
    ($factory:expr $(,)?) => {
        $crate::broker_suite!(@paused $factory;
            enqueue_one_and_many,
            values_out_of_range,
            values_at_the_edges,
            fetch_order,
            delayed_jobs,
            fetch_capped_by_limit,
            per_queue_budgets,
            one_lease_per_fetch,
            lease_renewal,
            lease_expiry_and_fencing,
            expiry_on_final_attempt,
            retry_counts_attempts,
            dead_letters,
            release_is_attempt_neutral,
            payloads_survive_every_return,
            cancel,
            settle_batch_is_per_job,
            purge_removes_every_state,
            wake_signal_on_new_work,
            bad_queue_name,
            listing_pages_by_cursor,
            error_history_per_attempt,
            dead_letters_retried_and_discarded,
            pause_and_resume,
            queue_stats_and_names,
            workers_and_throughput,
            bounded_counts,
            unique_keys,
            snooze_is_attempt_neutral,
            ordered_keys,
            ordered_retries_step_aside,
            unique_and_ordering_keys,
            rate_limits,
            rate_limits_per_key,
            rate_limits_per_key_read_past_a_backlog,
            rate_limits_per_key_spread_afresh_each_claim,
            groups,
        );

        #[$crate::__private::tokio::test(
            crate = "hopper_testkit::__private::tokio",
            flavor = "multi_thread",
            worker_threads = 4
        )]
        async fn concurrent_claimers() {
            $crate::cases::concurrent_claimers(($factory)().await).await;
        }

        #[$crate::__private::tokio::test(
            crate = "hopper_testkit::__private::tokio",
            flavor = "multi_thread",
            worker_threads = 4
        )]
        async fn unique_keys_racing_producers() {
            $crate::cases::unique_keys_racing_producers(($factory)().await).await;
        }

        #[$crate::__private::tokio::test(
            crate = "hopper_testkit::__private::tokio",
            flavor = "multi_thread",
            worker_threads = 4
        )]
        async fn ordered_keys_racing_claimers() {
            $crate::cases::ordered_keys_racing_claimers(($factory)().await).await;
        }

        #[$crate::__private::tokio::test(
            crate = "hopper_testkit::__private::tokio",
            flavor = "multi_thread",
            worker_threads = 4
        )]
        async fn rate_limit_racing_claimers() {
            $crate::cases::rate_limit_racing_claimers(($factory)().await).await;
        }
    };
    (@paused $factory:expr; $($case:ident,)*) => {
        $(
            #[$crate::__private::tokio::test(
                crate = "hopper_testkit::__private::tokio",
                start_paused = true
            )]
            async fn $case() {
                $crate::cases::$case(($factory)().await).await;
            }
        )*
    };
}

/// Expands to one test per case of [`worker_cases`], each on a fresh
/// [`Target`](worker_cases::Target) from `$factory`.
///
/// `$factory` is anything callable with no arguments that returns a future of a `Target`.
/// Each test runs on a current-thread runtime in real time; a case pauses the clock itself
/// on an in-process broker (see [`worker_cases`]). A broker whose run of a case must be
/// ignored names it with the reason, and the case is still compiled and listed:
///
/// ```ignore
/// hopper_testkit::worker_suite!(super::support::target, ignore {
///     crash_charges_the_attempt: "why, and where it is reported",
/// });
/// ```
///
/// Call the macro inside a module of its own: the tests take the cases' names.
#[macro_export]
macro_rules! worker_suite {
    ($factory:expr $(, ignore { $($ignored:ident : $why:literal),* $(,)? })? $(,)?) => {
        $crate::__worker_suite!(($) $factory; [$($($ignored : $why),*)?];
            enqueue_run_ack,
            retry_backoff_then_success,
            dead_letter_after_max_attempts,
            release_at_shutdown,
            crashed_worker_jobs_run_again,
            crash_charges_the_attempt,
            batch_sizes,
            pause_and_resume,
            cancel_before_start,
            worker_listed_while_running,
            snoozed_job_is_not_charged,
            periodic_slots_enqueued_once,
            ordered_keys_run_in_order,
            ordered_retries_step_aside_in_workers,
            rate_limit_holds_across_workers,
            rate_limit_per_key_holds_across_workers,
            group_completes_once,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __worker_suite {
    (($d:tt) $factory:expr; [$($ignored:ident : $why:literal),*]; $($case:ident,)*) => {
        macro_rules! __worker_case {
            $(
                ($ignored) => {
                    #[ignore = $why]
                    #[$crate::__private::tokio::test(crate = "hopper_testkit::__private::tokio")]
                    async fn $ignored() {
                        $crate::worker_cases::$ignored(($factory)().await).await;
                    }
                };
            )*
            ($d name:ident) => {
                #[$crate::__private::tokio::test(crate = "hopper_testkit::__private::tokio")]
                async fn $d name() {
                    $crate::worker_cases::$d name(($factory)().await).await;
                }
            };
        }
        $( __worker_case!($case); )*
    };
}
