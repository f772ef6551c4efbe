//! Ends of a worker: a graceful stop hands back what it had not started without charging
//! it, and a worker that dies holding jobs has them run again by another.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Broker, JobContext, JobState, Prefetch, QueueCounts, QueueOptions, Worker};

use super::{Gate, PATIENCE, Runs, Target, builder, choose_clock, counts, skip_for, wait_for};
use crate::helpers::enqueue_n;
use crate::workers::Connect;

/// 12 jobs, a worker at concurrency 1 with a window of 6: one job runs (held at a gate)
/// and 5 wait unstarted when the stop begins. The stop hands the 5 back (on a pulled
/// broker: 5 released, and the broker counts 11 pending while the running one is still
/// held), lets the running one finish (1 completed), and leaves 11 pending. None of them
/// was charged: their records say attempt 0 where the broker keeps records, and a second
/// worker runs each of them once, on attempt 1.
pub async fn release_at_shutdown(target: Target) {
    const N: usize = 12;
    const WINDOW: usize = 6;
    let Target { broker, queue, .. } = target;
    choose_clock(&broker);
    let made = enqueue_n(&broker, &queue, N).await;
    let gate = Gate::new();
    let runs = Runs::default();
    let (seen, held) = (runs.clone(), gate.clone());
    let worker = builder(&broker)
        .queue(
            queue.clone(),
            QueueOptions::new()
                .concurrency(1)
                .prefetch(Prefetch::Fixed(WINDOW)),
            move |job: JobContext<u64>| {
                seen.record(&job);
                let held = held.clone();
                async move {
                    held.passed().await;
                    Ok(())
                }
            },
        )
        .start()
        .expect("start");
    wait_for(&worker, "1 job running", |s| s.running == 1).await;
    // The window is full: 6 held, 1 running. A pulled broker's jobs wait in the worker's
    // buffer; a pushed broker's may still wait in the broker's own, not yet taken.
    wait_until(&broker, &queue, "6 jobs held", |c| {
        c.leased == WINDOW as u64
    })
    .await;
    let pushed = broker.capabilities().pushed;
    if !pushed {
        assert_eq!(
            worker.stats().buffered,
            WINDOW - 1,
            "jobs buffered at the stop"
        );
    }
    // The running job finishes once the stop has handed the others back: on a pulled
    // broker once the broker counts them pending again (11), which shows the release came
    // while a handler still ran. A pushed broker's subscription stays open until the stop
    // ends, so the server may hand released jobs straight back to it; there the gate opens
    // 300 ms after the stop began.
    let (b, q, opener) = (broker.clone(), queue.clone(), gate.clone());
    let watcher = tokio::spawn(async move {
        if pushed {
            tokio::time::sleep(Duration::from_millis(300)).await;
        } else {
            wait_until(&b, &q, "11 pending while the last handler runs", |c| {
                c.pending == (N - 1) as u64 && c.leased <= 1
            })
            .await;
        }
        opener.open();
    });
    let stats = worker.shutdown().await;
    watcher.await.expect("the watcher");
    let released = stats.released as usize;
    if pushed {
        assert!(
            released < WINDOW,
            "released {released}: more than the 5 not started"
        );
    } else {
        assert_eq!(released, WINDOW - 1, "released by the stop");
    }
    assert_eq!(
        (stats.completed, stats.retried),
        (1, 0),
        "completed / retried by the stop"
    );
    let after = counts(&broker, &queue).await;
    assert_eq!(
        (after.pending, after.leased, after.scheduled, after.dead),
        ((N - 1) as u64, 0, 0, 0),
        "pending / leased / scheduled / dead after the stop"
    );
    let first = runs.all();
    assert_eq!(first.len(), 1, "jobs started before the stop: {first:?}");
    assert_eq!(first[0].attempt, 1);

    if !broker.capabilities().pushed {
        let mut uncharged = 0;
        for id in made.iter().filter(|&&id| id != first[0].id) {
            let rec = broker
                .job(*id)
                .await
                .expect("job()")
                .unwrap_or_else(|| panic!("job {id} is gone"));
            assert_eq!(
                (rec.state, rec.job.attempt),
                (JobState::Pending, 0),
                "job {id} after the stop"
            );
            uncharged += 1;
        }
        assert_eq!(uncharged, N - 1);
    }

    let again = Runs::default();
    let seen = again.clone();
    let second = builder(&broker)
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(4),
            move |job: JobContext<u64>| {
                seen.record(&job);
                async { Ok(()) }
            },
        )
        .start()
        .expect("start");
    wait_for(&second, "the 11 jobs left", |s| {
        s.completed >= (N - 1) as u64
    })
    .await;
    let stats = second.shutdown().await;
    let attempts = again.attempts();
    assert_eq!(attempts.len(), N - 1, "jobs the second worker ran");
    assert!(
        !attempts.contains_key(&first[0].payload),
        "the job finished before the stop ran again"
    );
    assert!(
        attempts.values().all(|a| a == &[1]),
        "each left job ran once on attempt 1 (a release is not charged): {attempts:?}"
    );
    assert_eq!(stats.completed, (N - 1) as u64);
}

/// Waits, polling every 5 ms up to [`PATIENCE`], until `done` holds for the broker's
/// counts of `queue`; returns those counts.
async fn wait_until(
    broker: &Arc<dyn Broker>,
    queue: &str,
    what: &str,
    done: impl Fn(&QueueCounts) -> bool,
) -> QueueCounts {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let c = counts(broker, queue).await;
        if done(&c) {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited {PATIENCE:?} for {what}: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a crash and its rescue showed.
struct Rescue {
    /// Payloads whose handler the doomed worker had started.
    started: BTreeSet<u64>,
    /// Jobs the doomed worker held when it died: running plus buffered.
    held: usize,
    /// The broker's counts right after the crash.
    after_crash: QueueCounts,
    /// Each payload's attempts as the rescuing worker ran it.
    rescued: std::collections::BTreeMap<u64, Vec<u32>>,
    completed: u64,
}

const CRASH_JOBS: usize = 12;
const CRASH_WINDOW: usize = 6;

/// A worker on a broker of its own (`Target::connect`), on a runtime and thread of its
/// own, with a 1 s lease, concurrency 4 and a window of [`CRASH_WINDOW`]: it starts 4
/// handlers that never return, holds 2 more, and when killed its runtime is dropped: no
/// stop, no settlement, its connections cut. In real time on every broker: the doomed
/// runtime has a clock of its own.
pub(super) struct Doomed {
    started: Arc<Mutex<BTreeSet<u64>>>,
    ready: tokio::sync::oneshot::Receiver<usize>,
    go: tokio::sync::oneshot::Sender<()>,
    gone: tokio::sync::oneshot::Receiver<()>,
}

impl Doomed {
    pub(super) fn start(connect: Connect, queue: String) -> Self {
        let started = Arc::new(Mutex::new(BTreeSet::new()));
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
        let (tx, gone) = tokio::sync::oneshot::channel();
        let mark = started.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the doomed worker");
            runtime.block_on(async move {
                let broker = connect().await;
                // A pushed broker's server hands the window to the subscription, which
                // passes on only what free slots ask for: the 2 jobs past the 4 running
                // may wait in the subscription rather than in the worker's buffer, so the
                // server's count tells what is held.
                let pushed = broker.capabilities().pushed;
                let worker = Worker::builder(broker)
                    .lease_ttl(Duration::from_secs(1))
                    .poll_interval(Duration::from_millis(50))
                    .queue(
                        queue,
                        QueueOptions::new()
                            .concurrency(4)
                            .prefetch(Prefetch::Fixed(CRASH_WINDOW)),
                        move |job: JobContext<u64>| {
                            mark.lock().unwrap().insert(job.payload);
                            std::future::pending::<hopper_core::JobResult>()
                        },
                    )
                    .start()
                    .expect("start the doomed worker");
                let s = wait_for(&worker, "the doomed worker to hold its window", |s| {
                    s.running == 4 && (pushed || s.buffered == CRASH_WINDOW - 4)
                })
                .await;
                let _ = ready_tx.send(s.running + s.buffered);
                let _ = go_rx.await;
                // Past the first renewal (a third of the lease), so the crash is not
                // merely before any extension.
                tokio::time::sleep(Duration::from_millis(500)).await;
                drop(worker); // The handle only: the worker runs on until its runtime goes.
            });
            // The runtime drops here with the worker, its tasks and its broker inside it.
            drop(runtime);
            let _ = tx.send(());
        });
        Doomed {
            started,
            ready,
            go,
            gone,
        }
    }

    /// Waits until the doomed worker holds its window: how many jobs it holds.
    pub(super) async fn holding(&mut self) -> usize {
        (&mut self.ready)
            .await
            .expect("the doomed worker's thread panicked")
    }

    /// Kills it; returns the payloads whose handler it had started.
    pub(super) async fn kill(self) -> BTreeSet<u64> {
        self.go
            .send(())
            .expect("the doomed worker waits for the go");
        self.gone
            .await
            .expect("the doomed worker's thread panicked");
        self.started.lock().unwrap().clone()
    }
}

/// 12 jobs; a [`Doomed`] worker holds 6 of them and dies. A second worker on the test's
/// broker then runs all 12.
async fn crash_and_rescue(target: Target) -> Rescue {
    let Target {
        broker,
        connect,
        queue,
    } = target;
    enqueue_n(&broker, &queue, CRASH_JOBS).await;
    let pushed = broker.capabilities().pushed;
    let mut doomed = Doomed::start(connect, queue.clone());
    let mut held = doomed.holding().await;
    if pushed {
        // What the server pushed to the doomed worker's subscription: every job no longer
        // ready in the queue.
        let ready = |c: &QueueCounts| c.pending as usize <= CRASH_JOBS - CRASH_WINDOW;
        let c = wait_until(&broker, &queue, "the server to push the window", ready).await;
        held = CRASH_JOBS - c.pending as usize;
    }
    let started = doomed.kill().await;
    let after_crash = counts(&broker, &queue).await;

    let runs = Runs::default();
    let seen = runs.clone();
    let rescuer = builder(&broker)
        .queue(
            queue.clone(),
            QueueOptions::new().concurrency(4),
            move |job: JobContext<u64>| {
                seen.record(&job);
                async { Ok(()) }
            },
        )
        .start()
        .expect("start the rescuer");
    wait_for(&rescuer, "the rescuer to run all 12", |s| {
        s.completed >= CRASH_JOBS as u64
    })
    .await;
    let stats = rescuer.shutdown().await;
    let left = counts(&broker, &queue).await;
    assert_eq!(
        (left.pending, left.scheduled, left.leased, left.dead),
        (0, 0, 0, 0),
        "pending / scheduled / leased / dead after the rescue"
    );
    Rescue {
        started,
        held,
        after_crash,
        rescued: runs.attempts(),
        completed: stats.completed,
    }
}

/// Whether the broker can bring back a dead worker's jobs: by lease expiry, or (pushed)
/// by the server requeueing a closed channel's deliveries.
fn can_recover(target: &Target, case: &str) -> bool {
    let caps = target.broker.capabilities();
    let can = caps.leases || caps.pushed;
    if !can {
        skip_for(
            case,
            "leases",
            "a dead worker's jobs come back when its lease expires (or, pushed, when its \
             channel closes)",
        );
    }
    can
}

/// A worker holding 6 of 12 jobs (4 started) dies without settling: nothing of it is
/// settled, and another worker runs all 12 exactly once each, the 4 the dead one had
/// started among them.
pub async fn crashed_worker_jobs_run_again(target: Target) {
    if !can_recover(&target, "crashed_worker_jobs_run_again") {
        return;
    }
    let r = crash_and_rescue(target).await;
    assert_eq!(
        (r.started.len(), r.held),
        (4, CRASH_WINDOW),
        "handlers the doomed worker started / jobs it held"
    );
    let c = r.after_crash;
    assert_eq!(
        (c.pending + c.leased, c.scheduled, c.dead),
        (CRASH_JOBS as u64, 0, 0),
        "right after the crash nothing was settled: pending + leased / scheduled / dead \
         ({c:?})"
    );
    assert_eq!(r.rescued.len(), CRASH_JOBS, "jobs the rescuer ran");
    assert!(
        r.rescued.values().all(|a| a.len() == 1),
        "each job ran once on the rescuer: {:?}",
        r.rescued
    );
    assert!(
        r.started.iter().all(|p| r.rescued.contains_key(p)),
        "the jobs the dead worker started ran again: started {:?}",
        r.started
    );
    assert_eq!(r.completed, CRASH_JOBS as u64);
}

/// docs/design.md, "Safety rules": a dead worker's jobs return "with the attempt charged".
/// After the crash above, the 6 it held run on attempt 2 (the 4 it started among them),
/// the 6 it never fetched on attempt 1.
pub async fn crash_charges_the_attempt(target: Target) {
    if !can_recover(&target, "crash_charges_the_attempt") {
        return;
    }
    let r = crash_and_rescue(target).await;
    let on = |n: u32| r.rescued.values().filter(|a| a[0] == n).count();
    assert_eq!(
        (on(2), on(1)),
        (CRASH_WINDOW, CRASH_JOBS - CRASH_WINDOW),
        "jobs rescued on attempt 2 / on attempt 1: {:?}",
        r.rescued
    );
    let started: Vec<u32> = r.started.iter().map(|p| r.rescued[p][0]).collect();
    assert_eq!(
        started,
        vec![2; 4],
        "attempts of the 4 jobs the dead worker had started"
    );
}
