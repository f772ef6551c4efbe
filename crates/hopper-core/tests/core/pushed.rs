//! A worker on a broker that pushes deliveries under a window (RabbitMQ's model), against a
//! small in-test broker that pushes like RabbitMQ does: up to the window, one more per
//! settlement. What is asserted is what the worker asks of such a broker: the windows it
//! subscribes with (including Auto re-windowing), no fetch before the subscription, no lease
//! renewal, the subscription closed at shutdown, a fetch counted per hand-off, and when a
//! burst's settlements go.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::{
    Broker, CancelOutcome, Capabilities, CheckedJobs, FetchRequest, Fetched, Job, JobContext,
    JobId, JobRecord, JobResult, LeaseId, Prefetch, QueueCounts, QueueOptions, Result,
    SettleReport, Settlement, Worker,
};
use tokio::sync::watch;

use super::support::wait_for;

#[derive(Debug, Default)]
struct State {
    backlog: VecDeque<u64>,
    window: Option<u32>,
    /// Pushed and not settled: buffered here or held by the worker.
    outstanding: u32,
    buffer: VecDeque<Job>,
    subscribed: Vec<Option<u32>>,
    unsubscribed: usize,
    fetched_before_subscribe: bool,
    /// Settlements yield once before they apply, so the worker's first poll of one is
    /// `Pending` and the rest runs in a task of its own.
    settle_yields: bool,
    /// Settlement calls, and the tokio tasks they ran on.
    settles: u32,
    settle_tasks: std::collections::HashSet<Option<tokio::task::Id>>,
    /// The most the subscription's first push holds (all the window when `None`).
    first_push: Option<u32>,
    /// Handlers started, counted by the test's handler when it has one.
    started: Option<Arc<AtomicUsize>>,
    /// Per settlement call: its settlements, and the handlers started when it came.
    settled_at: Vec<(usize, usize)>,
    /// How long a `subscribe` takes to open (RabbitMQ: a channel, `basic.qos`, a consumer).
    subscribe_takes: Option<Duration>,
    /// `subscribe` and `unsubscribe` calls in the order they took effect.
    calls: Vec<&'static str>,
    /// How long after a settlement its replacements arrive (RabbitMQ: the ack's way to the
    /// server and the delivery's way back); at once when `None`.
    push_delay: Option<Duration>,
}

#[derive(Debug)]
struct Pushing {
    state: Mutex<State>,
    wake: watch::Sender<u64>,
    /// Itself, for a delayed push to run in a task of its own.
    me: std::sync::Weak<Pushing>,
}

impl Pushing {
    fn new(jobs: u64) -> Arc<Self> {
        Arc::new_cyclic(|me| Pushing {
            state: Mutex::new(State {
                backlog: (0..jobs).collect(),
                ..State::default()
            }),
            wake: watch::channel(0).0,
            me: me.clone(),
        })
    }

    fn push(&self, st: &mut State) {
        let mut pushed = false;
        let cap = st.first_push.take().unwrap_or(u32::MAX);
        while st.window.is_none_or(|w| st.outstanding < w) && st.outstanding < cap {
            let Some(i) = st.backlog.pop_front() else {
                break;
            };
            st.outstanding += 1;
            st.buffer.push_back(hopper_testkit::helpers::job(
                i as i64,
                i.to_string().into_bytes(),
            ));
            pushed = true;
        }
        if pushed {
            self.wake.send_modify(|n| *n += 1);
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }
}

#[async_trait]
impl Broker for Pushing {
    fn capabilities(&self) -> Capabilities {
        Capabilities::pushed("pushing").without_delayed()
    }
    async fn enqueue_checked(&self, _jobs: CheckedJobs) -> Result<Vec<hopper_core::Enqueued>> {
        unreachable!("the backlog is made up front")
    }
    async fn fetch(&self, request: FetchRequest) -> Result<Fetched> {
        let mut st = self.state();
        if st.subscribed.is_empty() {
            st.fetched_before_subscribe = true;
        }
        let n = request.total().min(st.buffer.len());
        let jobs: Vec<Job> = st.buffer.drain(..n).collect();
        Ok(Fetched {
            lease: LeaseId(1),
            jobs,
            next_due: None,
        })
    }
    async fn settle(&self, settlements: Vec<Settlement>) -> Result<SettleReport> {
        let yields = self.state().settle_yields;
        if yields {
            tokio::task::yield_now().await;
        }
        let mut st = self.state();
        st.settles += 1;
        st.settle_tasks.insert(tokio::task::try_id());
        if let Some(started) = &st.started {
            let at = (settlements.len(), started.load(Ordering::SeqCst));
            st.settled_at.push(at);
        }
        st.outstanding -= settlements.len() as u32;
        match (st.push_delay, self.me.upgrade()) {
            (Some(delay), Some(me)) => {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let mut st = me.state();
                    me.push(&mut st);
                });
            }
            _ => self.push(&mut st),
        }
        Ok(SettleReport {
            applied: settlements.len(),
            fenced: Vec::new(),
        })
    }
    async fn renew(&self, _leases: &[LeaseId], _ttl: Duration) -> Result<Vec<LeaseId>> {
        panic!("a worker renewed leases on a broker without leases");
    }
    async fn cancel(&self, _id: JobId) -> Result<CancelOutcome> {
        Ok(CancelOutcome::NotFound)
    }
    async fn job(&self, _id: JobId) -> Result<Option<JobRecord>> {
        Ok(None)
    }
    async fn counts(&self, _queue: &str) -> Result<QueueCounts> {
        Ok(QueueCounts::default())
    }
    async fn dead_letters(&self, _queue: &str, _limit: usize) -> Result<Vec<JobRecord>> {
        Ok(Vec::new())
    }
    async fn purge(&self, _queue: &str) -> Result<u64> {
        Ok(0)
    }
    async fn subscribe(&self, _queue: &str, window: Option<u32>) -> Result<()> {
        let takes = self.state().subscribe_takes;
        if let Some(takes) = takes {
            tokio::time::sleep(takes).await;
        }
        let mut st = self.state();
        st.calls.push("subscribe");
        st.subscribed.push(window);
        st.window = window;
        self.push(&mut st);
        Ok(())
    }
    async fn unsubscribe(&self, _queue: &str) -> Result<()> {
        let mut st = self.state();
        st.calls.push("unsubscribe");
        st.unsubscribed += 1;
        let back: Vec<u64> = st.buffer.drain(..).map(|j| j.id.0 as u64).collect();
        st.outstanding -= back.len() as u32;
        for i in back.into_iter().rev() {
            st.backlog.push_front(i);
        }
        Ok(())
    }
    fn wake_signal(&self) -> Option<watch::Receiver<u64>> {
        Some(self.wake.subscribe())
    }
}

async fn drain(jobs: u64, ms: u64, opts: QueueOptions) -> (Arc<Pushing>, hopper_core::WorkerStats) {
    let broker = Pushing::new(jobs);
    let worker = Worker::builder(broker.clone())
        // A lease far shorter than the run: a renewal would be due many times over.
        .lease_ttl(Duration::from_millis(50))
        .queue("q", opts, move |_job: JobContext<u64>| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            JobResult::Ok(())
        })
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == jobs).await;
    let stats = worker.shutdown().await;
    (broker, stats)
}

/// A pushed broker's settlement is taken on the event loop when it completes on its first
/// poll, and handed to a task when it does not; either way every job is settled once and
/// the window refills.
#[tokio::test(start_paused = true)]
async fn settlements_that_finish_at_once_or_later_both_free_the_window() {
    for yields in [false, true] {
        let broker = Pushing::new(200);
        broker.state().settle_yields = yields;
        let worker = Worker::builder(broker.clone())
            .queue(
                "q",
                QueueOptions::new()
                    .concurrency(4)
                    .prefetch(Prefetch::Fixed(8)),
                |_job: JobContext<u64>| async { JobResult::Ok(()) },
            )
            .start()
            .unwrap();
        wait_for(&worker, |s| s.completed == 200).await;
        let stats = worker.shutdown().await;
        let st = broker.state();
        assert_eq!(
            (st.outstanding, st.backlog.len()),
            (0, 0),
            "yields {yields}"
        );
        assert_eq!(u64::from(st.settles), stats.settle_calls, "yields {yields}");
        assert!(st.settles >= 200 / 8, "{} settlements", st.settles);
        // Taken at once, every settlement ran on the event loop's task; handed on, each on
        // a task of its own.
        let tasks = if yields { st.settles as usize } else { 1 };
        assert_eq!(st.settle_tasks.len(), tasks, "yields {yields}");
    }
}

/// A burst of brief jobs run on the event loop is settled as soon as half the window
/// waits on it, before the rest of the burst runs: the server pushes nothing into the
/// window until that ack arrives. Here a first job times the handler's polls, so that the
/// next ten, pushed at once into a window of 10, run on the loop; the ack of five goes
/// when six handlers have started (the first job and five of the ten), not eleven.
#[tokio::test(start_paused = true)]
async fn a_burst_on_the_loop_acks_half_the_window_before_the_rest_runs() {
    let broker = Pushing::new(11);
    let started = Arc::new(AtomicUsize::new(0));
    {
        let mut st = broker.state();
        st.first_push = Some(1);
        st.started = Some(started.clone());
    }
    let counter = started.clone();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(50)
                .prefetch(Prefetch::Fixed(10)),
            move |_job: JobContext<u64>| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { JobResult::Ok(()) }
            },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, |s| s.completed == 11).await;
    let inline = stats.inline_handoffs;
    worker.shutdown().await;
    let st = broker.state();
    assert_eq!(inline, 10, "the ten after the first ran on the loop");
    assert_eq!(
        st.settled_at[..2],
        [(1, 1), (5, 6)],
        "the first job alone, then five of the ten with five still to run"
    );
    let settled: usize = st.settled_at.iter().map(|&(n, _)| n).sum();
    assert_eq!(settled, 11);
}

#[tokio::test(start_paused = true)]
async fn auto_re_sends_the_window_as_it_doubles_up_to_sixteen() {
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    let (broker, stats) = drain(200, 10, opts).await;
    let st = broker.state();
    assert_eq!(
        st.subscribed,
        vec![Some(1), Some(2), Some(4), Some(8), Some(16)],
        "windows 1 2 4 8 16: each doubling after two full windows"
    );
    assert_eq!(stats.queues["q"].windows, vec![1, 2, 4, 8, 16]);
    assert!(!st.fetched_before_subscribe, "fetched before subscribing");
    assert_eq!(
        st.unsubscribed, 1,
        "the subscription closed once, at shutdown"
    );
    assert_eq!(
        stats.fetches, 200,
        "each job handed to the one-job handler is a fetch"
    );
    assert!(stats.batch_sizes.iter().all(|&n| n == 1));
}

/// As on a real server, each settlement's replacement arrives a round trip (1 ms) later,
/// so when a slot takes its next job the delivery that replaces the last one is still on
/// the wire and the worker holds one fewer than the window. The window still doubles up to
/// sixteen: the settlements applied since the last take count as out. Counting only what
/// was held, the window stopped at 2 (RabbitMQ's demo printed `1 2` on every run).
#[tokio::test(start_paused = true)]
async fn auto_grows_when_each_replacement_is_still_on_the_wire() {
    let broker = Pushing::new(200);
    broker.state().push_delay = Some(Duration::from_millis(1));
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    let worker = Worker::builder(broker.clone())
        .queue("q", opts, |_job: JobContext<u64>| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            JobResult::Ok(())
        })
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 200).await;
    worker.shutdown().await;
    assert_eq!(
        broker.state().subscribed,
        vec![Some(1), Some(2), Some(4), Some(8), Some(16)]
    );
}

#[tokio::test(start_paused = true)]
async fn long_jobs_keep_the_auto_window_at_one() {
    let opts = QueueOptions::new().concurrency(1).prefetch(Prefetch::Auto);
    let (broker, _) = drain(10, 300, opts).await;
    assert_eq!(broker.state().subscribed, vec![Some(1)]);
}

#[tokio::test(start_paused = true)]
async fn each_policy_subscribes_with_its_window() {
    let fixed = QueueOptions::new()
        .concurrency(4)
        .prefetch(Prefetch::Fixed(3));
    assert_eq!(
        drain(20, 1, fixed).await.0.state().subscribed,
        vec![Some(3)]
    );
    let slots = QueueOptions::new().concurrency(4).prefetch(Prefetch::Slots);
    assert_eq!(
        drain(20, 1, slots).await.0.state().subscribed,
        vec![Some(4)]
    );
    let default = QueueOptions::new().concurrency(4);
    assert_eq!(
        drain(20, 1, default).await.0.state().subscribed,
        vec![None],
        "no prefetch: the broker's default"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_queue_subscribes_for_its_batches_and_counts_them_as_fetches() {
    let broker = Pushing::new(40);
    let worker = Worker::builder(broker.clone())
        .batch_queue(
            "q",
            QueueOptions::new()
                .concurrency(2)
                .prefetch(Prefetch::Slots)
                .batch(5, Duration::from_millis(50)),
            |jobs: Vec<JobContext<u64>>| async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                jobs.iter().map(|_| JobResult::Ok(())).collect()
            },
        )
        .start()
        .unwrap();
    wait_for(&worker, |s| s.completed == 40).await;
    let stats = worker.shutdown().await;
    assert_eq!(
        broker.state().subscribed,
        vec![Some(10)],
        "slots: 2 × batch 5"
    );
    assert_eq!(stats.batch_sizes, vec![5; 8], "eight batches of five");
    assert_eq!(stats.fetches, 8);
}

/// A pause that comes while the first `subscribe` is still on its way closes the
/// subscription once it is open, not before: an `unsubscribe` sent at once would reach the
/// broker first, and the server would then push the whole backlog to a paused worker.
#[tokio::test(start_paused = true)]
async fn a_pause_during_the_first_subscribe_closes_the_subscription_once_open() {
    let broker = Pushing::new(10);
    broker.state().subscribe_takes = Some(Duration::from_millis(100));
    let started = Arc::new(AtomicUsize::new(0));
    let counter = started.clone();
    let worker = Worker::builder(broker.clone())
        .queue(
            "q",
            QueueOptions::new()
                .concurrency(2)
                .prefetch(Prefetch::Fixed(4)),
            move |_job: JobContext<u64>| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { JobResult::Ok(()) }
            },
        )
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    worker.pause("q").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    {
        let st = broker.state();
        assert_eq!(st.calls, ["subscribe", "unsubscribe"]);
        assert_eq!((st.outstanding, st.backlog.len()), (0, 10));
    }
    assert_eq!(started.load(Ordering::SeqCst), 0);
    worker.resume("q").await.unwrap();
    wait_for(&worker, |s| s.completed == 10).await;
    let stats = worker.shutdown().await;
    assert_eq!(started.load(Ordering::SeqCst), 10);
    assert_eq!(stats.completed, 10);
    assert_eq!(
        broker.state().calls,
        ["subscribe", "unsubscribe", "subscribe", "unsubscribe"]
    );
}
