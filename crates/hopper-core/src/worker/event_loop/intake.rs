//! How jobs come in: the [`Intake`] hides whether a broker is pulled from, pushes
//! deliveries under a window, or hands jobs over in process, and answers the three
//! questions the loop asks of a queue: its window, how many jobs to fetch now, and whether
//! a fetch that small is worth sending yet (docs/design.md, "How a worker takes work").

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use smallvec::SmallVec;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::dispatch::by_time;
use super::queue::{QueueState, queue_stats};
use super::{Event, EventLoop};
use crate::broker::{Budget, Capabilities, FetchRequest, Fetched, Outcome};
use crate::error::Result;
use crate::prefetch::{AutoSizer, Prefetch};
use crate::worker::stats::{WorkerStats, push_size};
use crate::worker::{IN_PROCESS_HANDOFFS, MAX_FETCHES_IN_FLIGHT};

mod ahead;

/// What one fetch asked for: (queue index, jobs) per queue.
pub(super) type Asked = Vec<(usize, usize)>;

/// When a fetch was sent, and its place among the worker's fetches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    pub(super) at: Instant,
    pub(super) seq: u64,
    /// This worker's fetches already in flight when it was sent.
    pub(super) beside: usize,
    /// Jobs it asked for, over every queue.
    pub(super) jobs: usize,
}

/// How a broker gives out its jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Each fetch is a round trip that claims jobs under a lease (SQL brokers).
    Pulled,
    /// The server pushes deliveries under a window per subscription (RabbitMQ); a fetch
    /// takes what already arrived.
    Pushed,
    /// The jobs live in this process (the memory broker): a fetch is a few map operations.
    InProcess,
}

impl Mode {
    pub(super) fn of(caps: &Capabilities) -> Self {
        if caps.pushed {
            Mode::Pushed
        } else if caps.in_process {
            Mode::InProcess
        } else {
            Mode::Pulled
        }
    }
}

/// The fetch side of the loop: the fetches in flight (one at most, except to keep a pulled
/// queue's round trip covered), their round trip, the backoff after a failure, and when to
/// look again at queues that came back short.
pub(super) struct Intake {
    pub(super) mode: Mode,
    /// Fetches sent and not answered.
    pub(super) in_flight: usize,
    /// Fetch round trips, as a moving average in which the newest weighs 30%: how long a
    /// top-up is held back at most, and how far ahead a pulled queue fetches.
    rtt: Option<Duration>,
    /// Each fetch's round trip divided by one more than this worker's fetches that were
    /// in flight when it was sent (what it may have waited behind), as a moving average
    /// in which the newest weighs 30%: the broker's own delay, not ours.
    per_fetch: Option<Duration>,
    /// The shortest of those: the broker's delay with nothing queued there.
    per_fetch_min: Option<Duration>,
    /// The shortest whole round trip of a timed fetch: the distance to the broker, which
    /// `rtt` stays near when fetches side by side are answered side by side.
    rtt_min: Option<Duration>,
    /// The most jobs one fetch asked for. Only fetches of at least half as many are timed
    /// for [`Intake::queued`]: a claim's time grows with its size (on MySQL above all), so
    /// the first small fetches would otherwise set a shortest time later fetches never see.
    largest_ask: usize,
    pub(super) retry_at: Option<Instant>,
    backoff: Duration,
    /// A fetch that completed as it was sent (in process, or pushed), not yet taken in.
    pub(super) fetched_now: Option<(Result<Fetched>, Asked, Sent)>,
    /// The number the next fetch is sent under.
    next_seq: u64,
    /// The broker's wake-up signal, watched while a queue is drained.
    pub(super) wake: Option<watch::Receiver<u64>>,
    /// When to fetch again for drained queues without a wake-up.
    pub(super) next_poll: Option<Instant>,
    /// When the earliest job a fetch saw scheduled comes due.
    pub(super) next_due: Option<Instant>,
    /// The queues' rate limits, set on the broker before every fetch until one succeeds,
    /// so that no job is claimed before its queue's limit holds.
    pub(super) limits_to_set: std::sync::Arc<[(String, crate::RateLimit)]>,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// `avg` with `sample` taken in at 30%, the weight every round-trip average here gives the
/// newest; the sample alone when there is no average yet.
fn moving_average(avg: Option<Duration>, sample: Duration) -> Duration {
    avg.map_or(sample, |avg| avg.mul_f64(0.7) + sample.mul_f64(0.3))
}

impl Intake {
    pub(super) fn new(mode: Mode, wake: Option<watch::Receiver<u64>>) -> Self {
        Intake {
            mode,
            in_flight: 0,
            next_seq: 0,
            rtt: None,
            per_fetch: None,
            per_fetch_min: None,
            rtt_min: None,
            largest_ask: 0,
            retry_at: None,
            backoff: FIRST_BACKOFF,
            fetched_now: None,
            wake,
            next_poll: None,
            next_due: None,
            limits_to_set: std::sync::Arc::new([]),
        }
    }

    #[inline]
    pub(super) fn pushed(&self) -> bool {
        self.mode == Mode::Pushed
    }

    #[inline]
    pub(super) fn in_process(&self) -> bool {
        self.mode == Mode::InProcess
    }

    /// The most jobs `q` may hold unsettled, buffered plus handed off. `job_time` is the
    /// time per job of the last timed hand-off, which sizes an in-process default window;
    /// `ahead` is [`Intake::ahead`].
    #[inline]
    pub(super) fn window(&self, q: &QueueState, job_time: Option<Duration>, ahead: usize) -> usize {
        let c = q.opts.concurrency;
        let per_slot = q.per_slot();
        match (q.opts.prefetch, self.mode) {
            (None, Mode::InProcess) => c * per_slot.max(IN_PROCESS_HANDOFFS * by_time(job_time, c)),
            (None, Mode::Pulled) => c * per_slot + ahead,
            (None | Some(Prefetch::Slots), _) => c * per_slot,
            // The server holds a pushed subscription to exactly `n`.
            (Some(Prefetch::Fixed(n)), Mode::Pushed) => n,
            (Some(Prefetch::Fixed(n)), _) => n.max(c),
            (Some(Prefetch::Auto), _) => c * q.sizer.as_ref().map_or(1, AutoSizer::size) + ahead,
        }
    }

    /// How many jobs to fetch for `q` now, given its `window` and how many it fetches
    /// `ahead` of its slots; 0 for none.
    #[inline]
    pub(super) fn want(&self, q: &QueueState, window: usize, ahead: usize) -> usize {
        if q.paused || q.drained || (self.pushed() && !q.subscribed) {
            return 0;
        }
        if ahead > 0 {
            if q.asked > 0 && self.queued() {
                return 0;
            }
            return Self::want_ahead(q, window);
        }
        if q.asked > 0 {
            // One fetch at a time for a queue that does not fetch ahead.
            return 0;
        }
        // In process, with the in-process default window, the buffer is kept topped up to
        // the window, a free slot or not: a fetch is a mutex, not a round trip, and only a
        // deep buffer lets hand-offs reach their size. Fetching only once the buffer ran
        // dry would split each fetch of `max_batch` ever thinner over the slots (50 over
        // 8: hand-offs of 6, 5, 4, … 1) and cost the loop a pass per job or two.
        let keep_full = self.in_process()
            && q.opts.prefetch.is_none()
            && q.opts.batch.is_none()
            && !q.opts.pop_ahead;
        let low_water = match q.opts.batch {
            Some((size, _)) => size.min(window),
            None if keep_full => window,
            None => 1,
        };
        if q.buffer.len() >= low_water {
            return 0;
        }
        let slot_free = q.busy < q.opts.concurrency;
        if q.opts.batch.is_none() && !slot_free && !q.opts.pop_ahead && !keep_full {
            return 0;
        }
        let mut held = q.buffer.len() + q.in_handoffs;
        if q.opts.pop_ahead {
            held -= q.busy.min(q.in_handoffs);
        }
        let room = window.saturating_sub(held);
        let policy = match (&q.sizer, q.opts.prefetch) {
            (Some(sizer), _) => sizer.size(),
            _ => room,
        };
        policy.min(room).min(q.opts.max_batch)
    }

    /// Whether a fetch of `want` for `q` would be a top-up worth holding back: part of the
    /// window is free while the rest is still held. Claiming each freed slot at once makes
    /// fetches alternate between nearly the whole window and one job (50 1 49 1 …), which
    /// doubles the round trips per job. So a broker with a round trip waits up to one fetch
    /// round trip for the rest of the window to free up (short jobs free it all within
    /// that time; a slot of a long job idles at most one round trip more), and an
    /// in-process broker waits until half a fetch is free, or an eighth of the window if
    /// that is less. `Prefetch::Auto` sizes fetches by its own rule; batch and `pop_ahead`
    /// queues keep theirs; a pushed broker's fetch only takes what already arrived.
    #[inline]
    pub(super) fn top_up(&self, q: &QueueState, want: usize, window: usize) -> bool {
        if self.pushed() || q.sizer.is_some() || q.opts.batch.is_some() || q.opts.pop_ahead {
            return false;
        }
        let full = window.min(q.opts.max_batch);
        let held = q.buffer.len() + q.in_handoffs;
        if self.in_process() {
            // Half a fetch, but no more than an eighth of the window: fetches as large as
            // the window would otherwise let the buffer run half empty between them.
            held > 0 && want < full.div_ceil(2).min(window.div_ceil(8))
        } else {
            held > 0 && want < full
        }
    }

    /// How long a top-up is held back: one fetch round trip, at most 50 ms; nothing until
    /// a fetch was timed.
    #[inline]
    pub(super) fn hold(&self) -> Duration {
        self.rtt
            .unwrap_or(Duration::ZERO)
            .min(Duration::from_millis(50))
    }

    /// A fetch sent at `sent` came back: times its round trip, and on failure sets when to
    /// try again.
    fn answered<T>(&mut self, result: Result<T>, sent: Sent) -> Option<T> {
        self.in_flight -= 1;
        let rtt = sent.at.elapsed();
        self.time(rtt, sent);
        match result {
            Ok(f) => {
                self.backoff = FIRST_BACKOFF;
                if !self.limits_to_set.is_empty() {
                    self.limits_to_set = std::sync::Arc::new([]);
                }
                Some(f)
            }
            Err(e) => {
                tracing::warn!(error = %e.chain(), retry_in = ?self.backoff, "fetch failed");
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(Duration::from_secs(5));
                None
            }
        }
    }
}

impl EventLoop {
    pub(super) fn window(&self, q: &QueueState) -> usize {
        let job_time = self.dispatch.job_time;
        self.intake
            .window(q, job_time, self.intake.ahead(q, job_time))
    }

    /// Every queue may have work again: a wake-up, a due job or the poll.
    pub(super) fn undrain(&mut self) {
        for q in &mut self.queues {
            q.drained = false;
        }
        self.intake.next_poll = None;
        self.intake.next_due = None;
    }

    /// Sends the fetches the queues want: one, or on a pulled broker as many as keep the
    /// round trip covered, up to [`MAX_FETCHES_IN_FLIGHT`].
    pub(super) fn maybe_fetch(&mut self, now: Instant, st: &mut WorkerStats) {
        while self.send_fetch(now) && self.intake.mode == Mode::Pulled {}
        st.peak_fetches_in_flight = st.peak_fetches_in_flight.max(self.intake.in_flight);
    }

    /// Sends one fetch if any queue wants jobs; whether it did.
    fn send_fetch(&mut self, now: Instant) -> bool {
        let pipelining = self.intake.in_flight > 0;
        if self.intake.in_flight >= MAX_FETCHES_IN_FLIGHT
            || self.stopping.is_some()
            || self.intake.retry_at.is_some_and(|t| t > now)
        {
            return false;
        }
        self.intake.retry_at = None;
        let hold = self.intake.hold();
        let job_time = self.dispatch.job_time;
        // Allocated only once a queue asks: most passes ask for nothing.
        let mut asked: Asked = Vec::new();
        for i in 0..self.queues.len() {
            let ahead = self.intake.ahead(&self.queues[i], job_time);
            if pipelining && ahead == 0 {
                // Only a queue that fetches ahead sends a fetch beside another.
                continue;
            }
            let window = self.intake.window(&self.queues[i], job_time, ahead);
            let want = self.intake.want(&self.queues[i], window, ahead);
            let top_up =
                want > 0 && ahead == 0 && self.intake.top_up(&self.queues[i], want, window);
            let q = &mut self.queues[i];
            if !top_up {
                q.top_up_since = None;
                if want > 0 {
                    asked.push((i, want));
                }
                continue;
            }
            if self.intake.in_process() {
                // Fetching is free, so there is no round trip to wait out; but a sliver of
                // the window per fetch would cost a pass of the loop per few jobs.
                continue;
            }
            let since = *q.top_up_since.get_or_insert(now);
            if now >= since + hold {
                q.top_up_since = None;
                asked.push((i, want));
            }
        }
        if asked.is_empty() {
            return false;
        }
        let sent = Sent {
            at: now,
            seq: self.intake.next_seq,
            beside: self.intake.in_flight,
            jobs: asked.iter().map(|&(_, n)| n).sum(),
        };
        self.intake.next_seq += 1;
        for &(i, n) in &asked {
            self.queues[i].asked += n;
            self.queues[i].last_sent = sent.seq;
        }
        if let Some(w) = self.intake.wake.as_mut() {
            // Anything enqueued from here on wakes a queue this fetch may find drained.
            w.borrow_and_update();
        }
        let request = FetchRequest {
            budgets: asked
                .iter()
                .map(|&(i, n)| Budget {
                    queue: self.queues[i].name.clone(),
                    limit: n,
                })
                .collect(),
            lease_ttl: self.cfg.lease_ttl,
        };
        self.intake.in_flight += 1;
        let broker = self.broker.clone();
        let span = tracing::info_span!(
            target: "hopper::fetch",
            "receive",
            "otel.name" = "receive",
            "otel.kind" = "consumer",
            "messaging.system" = "hopper",
            "messaging.operation.type" = "receive",
            "hopper.queues" = ?request.budgets.iter().map(|b| &b.queue).collect::<Vec<_>>(),
            "hopper.asked" = request.total(),
            "messaging.batch.message_count" = tracing::field::Empty,
        );
        let limits = self.intake.limits_to_set.clone();
        let fetch = async move {
            for (queue, limit) in limits.iter() {
                broker.set_rate_limit(queue, Some(*limit)).await?;
            }
            let result = broker.fetch(request).await;
            if let Ok(f) = &result {
                tracing::Span::current().record("messaging.batch.message_count", f.jobs.len());
            }
            result
        };
        let mut fetch = Box::pin(fetch.instrument(span));
        if self.intake.mode != Mode::Pulled {
            // An in-process fetch is a few map operations under a lock and returns on its
            // first poll, and so does a pushed broker's, which takes from what the server
            // already pushed: taking its result here spares a task, two wake-ups and a pass
            // of the loop per fetch, during which the slots would drain (and, at a small
            // window, the server would wait on the acknowledgements that follow).
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(result) = fetch.as_mut().poll(&mut cx) {
                self.intake.fetched_now = Some((result, asked, sent));
                return true;
            }
        }
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = fetch.await;
            let _ = events.send(Event::Fetched {
                result,
                asked,
                sent,
            });
        });
        true
    }

    /// Takes in what a fetch returned.
    pub(super) fn fetched(
        &mut self,
        result: Result<Fetched>,
        asked: Asked,
        sent: Sent,
        st: &mut WorkerStats,
    ) {
        for &(qi, n) in &asked {
            self.queues[qi].asked -= n;
        }
        let sent_at = sent.at;
        let Some(fetched) = self.intake.answered(result, sent) else {
            return;
        };
        let now = Instant::now();
        let pushed = self.intake.pushed();
        // A fetch of one queue returns only that queue's jobs (the broker's contract), so
        // their names are not read: each is a heap string of its own, cold by the time a
        // deep backlog is fetched, and comparing them cost a memory drain 6–10%.
        let only = match asked.as_slice() {
            [(qi, _)] => Some(*qi),
            _ => None,
        };
        // Jobs per queue; most workers serve a few queues, so this costs no allocation.
        let mut got: SmallVec<[usize; 8]> = smallvec::smallvec![0; self.queues.len()];
        match only {
            Some(qi) => got[qi] = fetched.jobs.len(),
            None => {
                for job in &fetched.jobs {
                    if let Some(qi) = self.queue_of(&job.queue) {
                        got[qi] += 1;
                    }
                }
            }
        }
        for &(qi, n) in &asked {
            let q = &mut self.queues[qi];
            if let Some(sizer) = q.sizer.as_mut().filter(|_| !pushed) {
                sizer.fetched(n, got[qi]);
            }
            q.full = got[qi] == n;
            // Only the queue's latest fetch can show it drained: an earlier one may have
            // claimed before jobs came whose wake-up a later send took, and answers may
            // come back in any order. Until the latest answers, no fetch goes beside it
            // (`full` is false).
            if got[qi] < n && q.last_sent == sent.seq {
                q.drained = true;
            }
        }
        if let Some(due) = fetched.next_due {
            // On the worker's clock, the broker's (a paused test clock compared with the
            // system's would read every due time as past, and fetch without end).
            let wait = (due - self.cfg.clock.now_millis()).clamp(0, i64::MAX) as u64;
            let wait = Duration::from_millis(wait).min(self.cfg.poll_interval);
            let at = now + wait;
            self.intake.next_due = Some(self.intake.next_due.map_or(at, |d| d.min(at)));
        }
        if fetched.jobs.is_empty() {
            st.empty_fetches += 1;
            return;
        }
        if !pushed {
            st.fetches += 1;
            st.fetched_jobs += fetched.jobs.len() as u64;
            push_size(&mut st.batch_sizes, fetched.jobs.len());
        }
        self.leases.held(fetched.lease, fetched.jobs.len(), sent_at);
        let mut jobs = fetched.jobs;
        if let Some(qi) = only.filter(|&qi| !self.queues[qi].paused && self.stopping.is_none()) {
            // One queue's fetch, to be kept: appended in one move, not job by job.
            self.queues[qi].take_in_all(std::mem::take(&mut jobs), now);
        }
        for job in jobs {
            let Some(qi) = only.or_else(|| self.queue_of(&job.queue)) else {
                tracing::warn!(queue = %job.queue, id = %job.id, "fetch returned a job of a queue not asked for; releasing it");
                self.settle_and_count(job.id, job.lease, Outcome::Release, None, st);
                continue;
            };
            if self.queues[qi].paused || self.stopping.is_some() {
                self.settle_and_count(job.id, job.lease, Outcome::Release, Some(qi), st);
                continue;
            }
            self.queues[qi].take_in(job, now);
        }
        if pushed {
            self.size_pushed_windows(&asked, &got);
        }
        // Only a fetch adds to what a queue holds, so only the queues it served can have
        // reached a new peak.
        for (q, &got) in self.queues.iter_mut().zip(&got) {
            if got == 0 {
                continue;
            }
            if q.unreported.len() < crate::registry::FETCHES_PER_REPORT {
                q.unreported.push(got as u32);
            }
            let held = q.buffer.len() + q.in_handoffs;
            q.meters.fetched.increment(got as u64);
            q.meters.fetch_size.record(got as f64);
            let qs = queue_stats(st, &q.name);
            push_size(&mut qs.fetch_sizes, got);
            qs.peak_held = qs.peak_held.max(held);
        }
    }
}
