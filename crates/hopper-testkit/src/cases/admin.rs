//! The operator calls: listings by cursor, error histories, re-driving and discarding
//! dead letters, pausing, and queue statistics. A broker that does not serve a call must
//! answer `NotSupported` for it, which these cases check instead.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::admin::{ERROR_HISTORY, MAX_ERROR_BYTES, MAX_PAGE};
use hopper_core::{
    Broker, Error, JobId, JobPage, JobQuery, JobState, ListState, NewJob, Outcome, Selection,
};
use tokio::time::advance;

use super::{counts, counts_of, one, record, settle, skip_if_pushed};
use crate::helpers::{TTL, enqueue, enqueue_n, fetch, ids, settle_all, skip};

async fn page(broker: &Arc<dyn Broker>, query: &JobQuery) -> JobPage {
    broker
        .list_jobs(query)
        .await
        .unwrap_or_else(|e| panic!("list_jobs {query:?} failed: {e:?}"))
}

/// Every page of a listing, `limit` at a time, checking each full page has a cursor.
async fn all_pages(broker: &Arc<dyn Broker>, mut query: JobQuery) -> Vec<JobId> {
    let mut seen = Vec::new();
    loop {
        let got = page(broker, &query).await;
        assert!(got.jobs.len() <= query.limit, "a page over its limit");
        seen.extend(got.jobs.iter().map(|r| r.job.id));
        match got.next {
            Some(next) => query.after = Some(next),
            None => {
                assert!(got.jobs.len() < query.limit, "a full page without a cursor");
                return seen;
            }
        }
        assert!(seen.len() <= 10_000, "paging does not end");
    }
}

pub(super) fn not_supported<T: std::fmt::Debug>(result: hopper_core::Result<T>, call: &str) {
    match result {
        Err(Error::NotSupported { .. }) => {}
        other => panic!("{call} on a broker that says it cannot: {other:?}"),
    }
}

/// Waiting jobs list in the order workers take them (priority, then `run_at`, then id),
/// page by page, and reversed newest first; scheduled and leased jobs list apart.
pub async fn listing_pages_by_cursor(broker: Arc<dyn Broker>) {
    if !broker.capabilities().admin.list {
        let query = JobQuery::new("q", ListState::Pending, 10);
        return not_supported(broker.list_jobs(&query).await, "list_jobs");
    }
    // 23 jobs on three priority levels, enqueued in an order that is not the listing's.
    let mut made = Vec::new();
    for i in 0..23 {
        let priority = [0, 5, -2][i % 3];
        let job = NewJob::new("q", format!("{i}")).priority(priority);
        made.push((priority, enqueue(&broker, vec![job]).await[0]));
        advance(Duration::from_millis(1)).await;
    }
    let later = enqueue(
        &broker,
        vec![
            NewJob::new("q", "later").delay(Duration::from_secs(60)),
            NewJob::new("q", "soon").delay(Duration::from_secs(30)),
        ],
    )
    .await;
    let mut expected = made.clone();
    expected.sort_by_key(|(priority, id)| (-priority, id.0));
    let expected: Vec<JobId> = expected.into_iter().map(|(_, id)| id).collect();

    let pending = all_pages(&broker, JobQuery::new("q", ListState::Pending, 7)).await;
    assert_eq!(pending, expected, "pending, 7 a page, in fetch order");
    let mut newest = JobQuery::new("q", ListState::Pending, 4);
    newest.newest_first = true;
    let reversed: Vec<JobId> = expected.iter().rev().copied().collect();
    assert_eq!(all_pages(&broker, newest).await, reversed, "newest first");
    let scheduled = all_pages(&broker, JobQuery::new("q", ListState::Scheduled, 1)).await;
    assert_eq!(
        scheduled,
        vec![later[1], later[0]],
        "scheduled, soonest first"
    );

    let held = fetch(&broker, "q", 5, TTL).await;
    let leased = page(&broker, &JobQuery::new("q", ListState::Leased, 10)).await;
    let mut leased_ids: Vec<JobId> = leased.jobs.iter().map(|r| r.job.id).collect();
    leased_ids.sort();
    let mut held_ids = ids(&held.jobs);
    held_ids.sort();
    assert_eq!(leased_ids, held_ids, "leased lists the jobs held");
    assert!(leased.jobs.iter().all(|r| r.state == JobState::Leased));
    let rest = all_pages(&broker, JobQuery::new("q", ListState::Pending, 100)).await;
    assert_eq!(rest, expected[5..], "pending after a fetch of 5");
    let other = page(&broker, &JobQuery::new("other", ListState::Pending, 10)).await;
    assert!(
        other.jobs.is_empty() && other.next.is_none(),
        "another queue"
    );

    for limit in [0, MAX_PAGE + 1] {
        let err = broker
            .list_jobs(&JobQuery::new("q", ListState::Pending, limit))
            .await
            .expect_err("a page size out of range");
        assert!(err.to_string().contains("limit"), "{err}");
    }
}

/// Each failed attempt's error is kept with its attempt number, the latest
/// `ERROR_HISTORY`, each cut to its last `MAX_ERROR_BYTES` bytes.
pub async fn error_history_per_attempt(broker: Arc<dyn Broker>) {
    if !broker.capabilities().admin.list {
        return skip(
            "error_history_per_attempt",
            "the broker keeps no job records",
        );
    }
    let id = enqueue(&broker, vec![NewJob::new("q", "x").max_attempts(3)]).await[0];
    for attempt in 1..=3u32 {
        let held = fetch(&broker, "q", 1, TTL).await;
        assert_eq!(ids(&held.jobs), vec![id], "attempt {attempt} fetched");
        let error = format!("failure {attempt}");
        let outcome = if attempt < 3 {
            Outcome::Retry {
                delay: Duration::ZERO,
                error,
                step_aside: false,
            }
        } else {
            Outcome::DeadLetter { error }
        };
        settle(&broker, one(id, held.lease, outcome)).await;
        advance(Duration::from_millis(10)).await;
    }
    let rec = record(&broker, id).await;
    assert_eq!(rec.state, JobState::Dead);
    let history: Vec<(u32, &str)> = rec
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(
        history,
        vec![(1, "failure 1"), (2, "failure 2"), (3, "failure 3")],
        "every attempt's error"
    );
    assert!(rec.errors.windows(2).all(|w| w[0].at < w[1].at), "{rec:?}");
    assert_eq!(rec.last_error.as_deref(), Some("failure 3"));
    assert!(rec.finished_at.is_some(), "a dead job has its end time");
    let dead = page(&broker, &JobQuery::new("q", ListState::Dead, 10)).await;
    assert_eq!(dead.jobs.len(), 1);
    assert_eq!(
        dead.jobs[0].errors, rec.errors,
        "the listing carries the history"
    );

    let many = ERROR_HISTORY as u32 + 3;
    let id = enqueue(
        &broker,
        vec![NewJob::new("long", "x").max_attempts(many + 1)],
    )
    .await[0];
    for attempt in 1..=many {
        let held = fetch(&broker, "long", 1, TTL).await;
        let error = format!("{}failure {attempt}", "-".repeat(MAX_ERROR_BYTES));
        let retry = Outcome::Retry {
            delay: Duration::ZERO,
            error,
            step_aside: false,
        };
        settle(&broker, one(id, held.lease, retry)).await;
    }
    let rec = record(&broker, id).await;
    let attempts: Vec<u32> = rec.errors.iter().map(|e| e.attempt).collect();
    let kept: Vec<u32> = (many - ERROR_HISTORY as u32 + 1..=many).collect();
    assert_eq!(attempts, kept, "the latest {ERROR_HISTORY} attempts");
    let last = rec.errors.last().expect("a history");
    assert_eq!(last.error.len(), MAX_ERROR_BYTES, "a long error is cut");
    assert!(
        last.error.ends_with(&format!("failure {many}")),
        "its end is kept"
    );
}

/// Making `n` dead letters on `queue`, oldest first.
async fn dead_jobs(broker: &Arc<dyn Broker>, queue: &str, n: usize) -> Vec<JobId> {
    let made = enqueue_n(broker, queue, n).await;
    let held = fetch(broker, queue, n, TTL).await;
    let dead = Outcome::DeadLetter {
        error: "broken".into(),
    };
    for s in settle_all(&held, &dead) {
        settle(broker, vec![s]).await;
        advance(Duration::from_millis(1)).await;
    }
    made
}

/// Dead letters go back to pending with attempts reset and history kept, one, a list or a
/// chunk of a queue at a time, oldest first; discarding deletes them; live jobs are left.
pub async fn dead_letters_retried_and_discarded(broker: Arc<dyn Broker>) {
    if !broker.capabilities().admin.redrive {
        let which = Selection::Jobs(vec![JobId(1)]);
        not_supported(broker.retry_dead(&which).await, "retry_dead");
        return not_supported(broker.discard_dead(&which).await, "discard_dead");
    }
    if skip_if_pushed(&broker, "dead_letters_retried_and_discarded") {
        return;
    }
    let dead = dead_jobs(&broker, "q", 6).await;
    let live = enqueue_n(&broker, "q", 1).await[0];
    assert_eq!(counts(&broker, "q").await, counts_of(1, 0, 0, 6));

    let one_and_live = Selection::Jobs(vec![dead[0], live, JobId(i64::MAX)]);
    assert_eq!(
        broker.retry_dead(&one_and_live).await.unwrap(),
        1,
        "one dead of three ids"
    );
    let rec = record(&broker, dead[0]).await;
    assert_eq!(rec.state, JobState::Pending, "retried");
    assert_eq!(rec.job.attempt, 0, "attempts reset");
    assert_eq!(rec.errors.len(), 1, "history kept: {rec:?}");
    assert_eq!(
        record(&broker, live).await.job.attempt,
        0,
        "the live job untouched"
    );

    let chunk = Selection::Queue {
        queue: "q".into(),
        at_most: 2,
    };
    assert_eq!(broker.retry_dead(&chunk).await.unwrap(), 2, "a chunk of 2");
    for id in &dead[1..3] {
        assert_eq!(
            record(&broker, *id).await.state,
            JobState::Pending,
            "oldest first"
        );
    }
    assert_eq!(counts(&broker, "q").await, counts_of(4, 0, 0, 3));

    let discard = Selection::Jobs(vec![dead[3], live]);
    assert_eq!(
        broker.discard_dead(&discard).await.unwrap(),
        1,
        "only the dead one"
    );
    assert!(
        broker.job(dead[3]).await.unwrap().is_none(),
        "discarded is gone"
    );
    assert!(
        broker.job(live).await.unwrap().is_some(),
        "a live job is not discarded"
    );
    let all = Selection::Queue {
        queue: "q".into(),
        at_most: 100,
    };
    assert_eq!(broker.discard_dead(&all).await.unwrap(), 2, "the rest");
    assert_eq!(broker.discard_dead(&all).await.unwrap(), 0, "nothing left");
    assert_eq!(counts(&broker, "q").await, counts_of(4, 0, 0, 0));

    let again = fetch(&broker, "q", 10, TTL).await;
    let mut got = ids(&again.jobs);
    got.sort();
    assert_eq!(
        got,
        vec![dead[0], dead[1], dead[2], live],
        "the retried run again"
    );
    assert!(
        again.jobs.iter().all(|j| j.attempt == 1),
        "as a first attempt"
    );
}

/// A paused queue hands out nothing, to any fetch, and still takes enqueues; resumed, it
/// hands out everything. Other queues are not affected.
pub async fn pause_and_resume(broker: Arc<dyn Broker>) {
    if !broker.capabilities().admin.pause {
        return not_supported(broker.set_paused("q", true).await, "set_paused");
    }
    if skip_if_pushed(&broker, "pause_and_resume") {
        return;
    }
    let bad = broker.set_paused("bad queue!", true).await;
    assert!(
        matches!(&bad, Err(e) if e.is_config() && e.to_string().contains("bad queue!")),
        "a bad queue name is refused by name: {bad:?}"
    );
    let first = enqueue_n(&broker, "q", 3).await;
    enqueue_n(&broker, "other", 2).await;
    assert!(
        broker.set_paused("q", true).await.unwrap(),
        "pausing changes it"
    );
    assert!(
        !broker.set_paused("q", true).await.unwrap(),
        "pausing twice does not"
    );
    assert!(
        fetch(&broker, "q", 10, TTL).await.jobs.is_empty(),
        "fetched while paused"
    );
    let more = enqueue_n(&broker, "q", 1).await;
    assert_eq!(
        counts(&broker, "q").await,
        counts_of(4, 0, 0, 0),
        "enqueued while paused"
    );
    assert_eq!(
        fetch(&broker, "other", 10, TTL).await.jobs.len(),
        2,
        "another queue"
    );
    let status = broker.queue_stats("q").await.unwrap();
    assert!(status.paused, "stats say paused");

    assert!(
        broker.set_paused("q", false).await.unwrap(),
        "resuming changes it"
    );
    assert!(
        !broker.set_paused("q", false).await.unwrap(),
        "resuming twice does not"
    );
    let got = fetch(&broker, "q", 10, TTL).await;
    let mut expected = first;
    expected.extend(more);
    assert_eq!(ids(&got.jobs), expected, "everything after resume");
    assert!(!broker.queue_stats("q").await.unwrap().paused);
}

/// Queue names list every queue with jobs, or paused; statistics give counts and the age
/// of the oldest due job.
pub async fn queue_stats_and_names(broker: Arc<dyn Broker>) {
    if !broker.capabilities().admin.stats {
        not_supported(broker.queues().await, "queues");
        return not_supported(broker.queue_stats("q").await, "queue_stats");
    }
    if skip_if_pushed(&broker, "queue_stats_and_names") {
        return;
    }
    assert!(broker.queues().await.unwrap().is_empty(), "a fresh broker");
    dead_jobs(&broker, "a", 1).await;
    enqueue_n(&broker, "b", 2).await;
    advance(Duration::from_secs(5)).await;
    enqueue(
        &broker,
        vec![NewJob::new("b", "later").delay(Duration::from_secs(60))],
    )
    .await;
    broker.set_paused("c", true).await.unwrap();
    assert_eq!(broker.queues().await.unwrap(), vec!["a", "b", "c"]);

    let b = broker.queue_stats("b").await.unwrap();
    assert_eq!(b.queue, "b");
    assert_eq!(b.counts, counts_of(2, 1, 0, 0));
    assert_eq!(
        b.lag,
        Some(Duration::from_secs(5)),
        "the oldest due job waited 5 s"
    );
    assert!(!b.paused);
    let a = broker.queue_stats("a").await.unwrap();
    assert_eq!(
        (a.counts, a.lag),
        (counts_of(0, 0, 0, 1), None),
        "only a dead job"
    );
    let none = broker.queue_stats("nothing").await.unwrap();
    assert_eq!(
        (none.counts, none.lag, none.paused),
        (counts_of(0, 0, 0, 0), None, false)
    );

    broker.purge("b").await.unwrap();
    broker.set_paused("c", false).await.unwrap();
    assert_eq!(
        broker.queues().await.unwrap(),
        vec!["a"],
        "purged and resumed"
    );
}

/// A glance counts each state up to its bound: with 30 pending, 5 scheduled and 12 dead, a
/// bound of 10 shows 11 (more than 10), 5 and 11, and a bound of 100 the exact counts. A
/// broker that counts exactly at any size says so with no bound. Lag and pause are the
/// same as the full statistics'.
pub async fn bounded_counts(broker: Arc<dyn Broker>) {
    if !broker.capabilities().admin.stats || skip_if_pushed(&broker, "bounded_counts") {
        return;
    }
    dead_jobs(&broker, "q", 12).await;
    enqueue_n(&broker, "q", 30).await;
    let later = (0..5)
        .map(|i| NewJob::new("q", format!("later {i}")).delay(Duration::from_secs(60)))
        .collect();
    enqueue(&broker, later).await;
    advance(Duration::from_secs(2)).await;
    let full = broker.queue_stats("q").await.unwrap();
    assert_eq!(full.counts, counts_of(30, 5, 0, 12));
    let glance = broker.queue_glance("q", 10).await.unwrap();
    match glance.bound {
        Some(10) => assert_eq!(
            glance.counts,
            counts_of(11, 5, 0, 11),
            "11 means more than 10"
        ),
        None => assert_eq!(glance.counts, full.counts, "counted exactly"),
        other => panic!("a glance bounded by 10 says bound {other:?}"),
    }
    assert_eq!((glance.lag, glance.paused), (full.lag, full.paused));
    let wide = broker.queue_glance("q", 100).await.unwrap();
    assert_eq!(wide.counts, full.counts, "under the bound, exact");
    assert!(matches!(wide.bound, Some(100) | None), "{:?}", wide.bound);
}
