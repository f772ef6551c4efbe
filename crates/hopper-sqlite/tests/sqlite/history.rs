//! Error histories past what the suite covers: the reaper's entry for a lease that ran out
//! on the last attempt, and a history carried through re-drives, its attempts counted
//! afresh after each.

use std::time::Duration;

use hopper_core::{Broker, FetchRequest, JobId, NewJob, Outcome, Selection, Settlement};
use tokio::time::advance;

use super::support::temp_broker;

const TTL: Duration = Duration::from_secs(30);

async fn history(broker: &dyn Broker, id: JobId) -> Vec<(u32, String)> {
    let rec = broker.job(id).await.unwrap().unwrap();
    rec.errors
        .into_iter()
        .map(|e| (e.attempt, e.error))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_reaper_and_re_drives_keep_the_history() {
    let broker = temp_broker().await;
    let id = broker
        .enqueue(vec![NewJob::new("q", "x").max_attempts(2)])
        .await
        .unwrap()[0];
    let fetch = || broker.fetch(FetchRequest::one("q", 1, TTL));
    let first = fetch().await.unwrap();
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        error: "first".into(),
        step_aside: false,
    };
    broker
        .settle(vec![Settlement {
            job: id,
            lease: first.lease,
            outcome: retry,
        }])
        .await
        .unwrap();
    // The second and last attempt's lease runs out: the reaper dead-letters the job.
    assert_eq!(fetch().await.unwrap().jobs.len(), 1);
    advance(TTL + Duration::from_secs(1)).await;
    assert!(fetch().await.unwrap().jobs.is_empty());
    let expired = "lease expired on the final attempt".to_owned();
    assert_eq!(
        history(&*broker, id).await,
        [(1, "first".to_owned()), (2, expired.clone())]
    );

    // Re-driven, it runs as new: the next failure is attempt 1 again, after the others.
    let which = Selection::Jobs(vec![id]);
    assert_eq!(broker.retry_dead(&which).await.unwrap(), 1);
    let again = fetch().await.unwrap();
    assert_eq!(again.jobs[0].attempt, 1);
    let dead = Outcome::DeadLetter {
        error: "third".into(),
    };
    broker
        .settle(vec![Settlement {
            job: id,
            lease: again.lease,
            outcome: dead,
        }])
        .await
        .unwrap();
    assert_eq!(
        history(&*broker, id).await,
        [
            (1, "first".to_owned()),
            (2, expired),
            (1, "third".to_owned())
        ]
    );
    assert_eq!(broker.discard_dead(&which).await.unwrap(), 1);
    assert!(broker.job(id).await.unwrap().is_none());
}
