//! How each worker fetched, over time: the server follows the workers' reports (one
//! `workers` call every few seconds, whatever the number of open pages) and keeps, per
//! worker and queue, the latest points: the window, what was held and running, and the
//! sizes of the fetches since the report before. Pages and the API read it from memory,
//! and pages take the workers as last read rather than asking the broker again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::WorkerInfo;
use serde::Serialize;
use utoipa::ToSchema;

use crate::App;

/// Points kept per worker and queue: ten minutes of reports every 5 s.
pub const KEPT_POINTS: usize = 120;

/// One report of one queue of one worker.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Point {
    /// When the worker reported (ms since the epoch).
    pub at: i64,
    pub window: usize,
    pub held: usize,
    pub running: usize,
    /// The sizes of the fetches since the report before, in order.
    pub fetches: Vec<u32>,
}

/// One worker's points for one queue, oldest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Track {
    pub worker: String,
    pub host: String,
    pub pid: u32,
    pub points: Vec<Point>,
}

/// A worker's track of one queue as kept: who, and its latest points.
type Kept = (Track, VecDeque<Point>);

#[derive(Debug, Default)]
pub(crate) struct Timeline {
    /// By (worker, queue).
    tracks: Mutex<HashMap<(String, String), Kept>>,
    /// The workers as last read, and when: pages use them instead of asking the broker.
    latest: Mutex<Option<(std::time::Instant, Vec<WorkerInfo>)>>,
    /// Each queue's throughput buckets as last read, and when.
    buckets: Mutex<HashMap<String, (std::time::Instant, Vec<hopper::registry::Bucket>)>>,
}

impl Timeline {
    /// Takes in the reports of `workers` not seen yet, and forgets workers silent for ten
    /// minutes.
    pub(crate) fn observe(&self, workers: &[WorkerInfo]) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((std::time::Instant::now(), workers.to_vec()));
        let mut tracks = self.tracks.lock().unwrap_or_else(|e| e.into_inner());
        // A worker missing from one read (a late report) keeps its track; one silent for
        // the whole window is forgotten.
        let now = hopper::broker::to_millis(std::time::SystemTime::now());
        let window = (KEPT_POINTS as i64) * 5_000;
        tracks.retain(|_, (_, points)| points.back().is_some_and(|p| now - p.at < window));
        for w in workers {
            for q in &w.queues {
                let key = (w.id.clone(), q.queue.clone());
                let (_, points) = tracks.entry(key).or_insert_with(|| {
                    let track = Track {
                        worker: w.id.clone(),
                        host: w.host.clone(),
                        pid: w.pid,
                        points: Vec::new(),
                    };
                    (track, VecDeque::new())
                });
                if points.back().is_some_and(|p| p.at >= w.heartbeat_at) {
                    continue;
                }
                if points.len() == KEPT_POINTS {
                    points.pop_front();
                }
                points.push_back(Point {
                    at: w.heartbeat_at,
                    window: q.window,
                    held: q.held,
                    running: q.running,
                    fetches: q.fetches.clone(),
                });
            }
        }
    }

    /// The workers as read within `fresh`, if they were.
    pub(crate) fn latest(&self, fresh: Duration) -> Option<Vec<WorkerInfo>> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest
            .as_ref()
            .filter(|(at, _)| at.elapsed() <= fresh)
            .map(|(_, workers)| workers.clone())
    }

    /// The tracks of `queue`, by worker id.
    pub(crate) fn of_queue(&self, queue: &str) -> Vec<Track> {
        let tracks = self.tracks.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Track> = tracks
            .iter()
            .filter(|((_, q), _)| q == queue)
            .map(|(_, (track, points))| Track {
                points: points.iter().cloned().collect(),
                ..track.clone()
            })
            .collect();
        out.sort_by(|a, b| a.worker.cmp(&b.worker));
        out
    }
}

/// A queue's throughput buckets, read from the broker at most once per `fresh`: they only
/// change when a worker reports, so a page refreshing faster than workers report costs
/// the broker nothing more for its chart.
pub(crate) async fn buckets(
    app: &App,
    queue: &str,
) -> hopper::Result<Vec<hopper::registry::Bucket>> {
    let fresh = app.follow_every;
    {
        let cached = app
            .timeline
            .buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((_, buckets)) = cached.get(queue).filter(|(at, _)| at.elapsed() < fresh) {
            return Ok(buckets.clone());
        }
    }
    let buckets = app.broker.throughput(queue).await?;
    let mut cached = app
        .timeline
        .buckets
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    cached.retain(|_, (at, _)| at.elapsed() < fresh);
    cached.insert(
        queue.to_owned(),
        (std::time::Instant::now(), buckets.clone()),
    );
    Ok(buckets)
}

/// Follows the workers' reports every `every`, until the task is aborted.
pub(crate) async fn follow(app: Arc<App>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match app.broker.workers().await {
            Ok(workers) => app.timeline.observe(&workers),
            Err(e) => tracing::debug!(error = %e.chain(), "following the workers' reports"),
        }
    }
}
