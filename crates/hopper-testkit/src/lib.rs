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
//! - [`cleanup`]: [`WithCleanup`], a broker that removes its schema or database when
//!   dropped, and [`unique_name`].
//! - [`workers`]: worker-level cases for brokers shared by several processes.
//! - [`broker_suite!`]: the macro that turns the cases into tests.

pub mod cases;
pub mod cleanup;
pub mod helpers;
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
        );

        #[$crate::__private::tokio::test(
            crate = "hopper_testkit::__private::tokio",
            flavor = "multi_thread",
            worker_threads = 4
        )]
        async fn concurrent_claimers() {
            $crate::cases::concurrent_claimers(($factory)().await).await;
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
