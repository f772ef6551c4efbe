//! Unique keys, enforced by the broker ([`hopper_core::UniqueScope`]), and snoozing.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Enqueued, JobId, JobState, NewJob, Outcome, UniqueScope};
use tokio::time::advance;

use super::{capable_or_refuses, counts, counts_of, one, record, settle, skip_if_pushed};
use crate::helpers::{TTL, fetch, ids};

/// Enqueues `jobs`, panicking on error.
async fn put(broker: &Arc<dyn Broker>, jobs: Vec<NewJob>) -> Vec<Enqueued> {
    broker
        .enqueue_reported(jobs)
        .await
        .unwrap_or_else(|e| panic!("enqueue failed: {e:?}"))
}

fn keyed(queue: &str, key: &str, scope: UniqueScope) -> NewJob {
    NewJob::new(queue, key.as_bytes().to_vec()).unique(key, scope)
}

/// Says whether the broker enforces keys; when it does not, checks that it refuses them
/// and stores nothing.
async fn enforces_keys(broker: &Arc<dyn Broker>, case: &str) -> bool {
    let has = broker.capabilities().unique;
    let job = NewJob::new("q", b"k".to_vec()).unique_key("k");
    capable_or_refuses(broker, has, "unique", job, case).await
}

/// Each scope holds its key exactly as long as it says: a duplicate gets the holder's id
/// and is not stored; once the hold ends, the next job with the key is stored.
pub async fn unique_keys(broker: Arc<dyn Broker>) {
    if !enforces_keys(&broker, "unique_keys").await {
        return;
    }
    let unfinished = UniqueScope::Unfinished;
    // One batch: a key twice, the same key on another queue, a job without a key.
    let first = put(
        &broker,
        vec![
            keyed("q", "u", unfinished),
            keyed("q", "u", unfinished),
            keyed("other", "u", unfinished),
            NewJob::new("q", b"plain".to_vec()),
        ],
    )
    .await;
    let u = first[0].id;
    assert!(!first[0].existing && !first[2].existing && !first[3].existing);
    assert_eq!(first[1], Enqueued::existing(u), "a key twice in one batch");
    assert_ne!(
        first[2].id, u,
        "the same key on another queue is another key"
    );
    assert_eq!(counts(&broker, "q").await, counts_of(2, 0, 0, 0));
    let keys = (
        record(&broker, u).await.unique_key,
        record(&broker, first[3].id).await.unique_key,
    );
    assert_eq!(keys, (Some("u".to_owned()), None), "records show the key");
    // Held while leased and while waiting to retry; free once acknowledged.
    let held = fetch(&broker, "q", 2, TTL).await;
    assert_eq!(ids(&held.jobs), vec![u, first[3].id]);
    settle(&broker, one(first[3].id, held.lease, Outcome::Ack)).await;
    let again = put(&broker, vec![keyed("q", "u", unfinished)]).await;
    assert_eq!(again, vec![Enqueued::existing(u)], "held while leased");
    let retry = Outcome::Retry {
        delay: Duration::from_secs(10),
        error: "later".into(),
        step_aside: false,
    };
    settle(&broker, one(u, held.lease, retry)).await;
    let again = put(&broker, vec![keyed("q", "u", unfinished)]).await;
    assert_eq!(
        again,
        vec![Enqueued::existing(u)],
        "held while waiting to retry"
    );
    advance(Duration::from_secs(10)).await;
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(ids(&held.jobs), vec![u]);
    settle(&broker, one(u, held.lease, Outcome::Ack)).await;
    let next = put(&broker, vec![keyed("q", "u", unfinished)]).await;
    assert!(!next[0].existing, "stored once the holder completed");
    assert_ne!(next[0].id, u);
    // Dead letters and cancelled jobs hold nothing.
    let held = fetch(&broker, "q", 1, TTL).await;
    let died = Outcome::DeadLetter { error: "no".into() };
    settle(&broker, one(next[0].id, held.lease, died)).await;
    let dead = record(&broker, next[0].id).await;
    assert_eq!(
        dead.unique_key.as_deref(),
        Some("u"),
        "a dead letter keeps its key"
    );
    let after_dead = put(&broker, vec![keyed("q", "u", unfinished)]).await;
    assert!(!after_dead[0].existing, "stored once the holder died");
    broker.cancel(after_dead[0].id).await.unwrap();
    let after_cancel = put(&broker, vec![keyed("q", "u", unfinished)]).await;
    assert!(
        !after_cancel[0].existing,
        "stored once the holder was cancelled"
    );

    // Queued: held only until a worker first takes the job.
    let queued = put(&broker, vec![keyed("q", "w", UniqueScope::Queued)]).await[0].id;
    let again = put(&broker, vec![keyed("q", "w", UniqueScope::Queued)]).await;
    assert_eq!(
        again,
        vec![Enqueued::existing(queued)],
        "held while waiting"
    );
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(ids(&held.jobs), vec![after_cancel[0].id]);
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(ids(&held.jobs), vec![queued]);
    let taken = put(&broker, vec![keyed("q", "w", UniqueScope::Queued)]).await;
    assert!(!taken[0].existing, "stored once the holder was taken");
    // Handed back uncharged, a job holds its queued key again, as if never taken.
    let x = put(&broker, vec![keyed("s", "x", UniqueScope::Queued)]).await[0].id;
    let held = fetch(&broker, "s", 1, TTL).await;
    let snooze = Outcome::Snooze {
        delay: Duration::from_secs(1),
    };
    settle(&broker, one(x, held.lease, snooze)).await;
    let again = put(&broker, vec![keyed("s", "x", UniqueScope::Queued)]).await;
    assert_eq!(
        again,
        vec![Enqueued::existing(x)],
        "held again once snoozed"
    );

    // A period: held for a minute from the enqueue, even after the job completed.
    let minute = UniqueScope::For(Duration::from_secs(60));
    let p = put(&broker, vec![keyed("p", "m", minute)]).await[0].id;
    let held = fetch(&broker, "p", 1, TTL).await;
    settle(&broker, one(p, held.lease, Outcome::Ack)).await;
    advance(Duration::from_secs(59)).await;
    let again = put(&broker, vec![keyed("p", "m", minute)]).await;
    assert_eq!(
        again,
        vec![Enqueued::existing(p)],
        "held 59 s after enqueue"
    );
    advance(Duration::from_secs(1)).await;
    let later = put(&broker, vec![keyed("p", "m", minute)]).await;
    assert!(!later[0].existing, "stored 60 s after the first");
    assert_eq!(counts(&broker, "p").await, counts_of(1, 0, 0, 0));

    // A purge ends the holds of the jobs it removed.
    let before = put(&broker, vec![keyed("r", "k", unfinished)]).await[0].id;
    assert_eq!(broker.purge("r").await.unwrap(), 1);
    let after = put(&broker, vec![keyed("r", "k", unfinished)]).await;
    assert!(
        !after[0].existing && after[0].id != before,
        "stored after a purge"
    );
}

/// 8 producers race to enqueue the same 100 keys, each in its own order and in batches
/// of 10: exactly one job per key is stored, and every answer for a key names it. Where
/// the broker keeps ordering keys, the race runs again on another queue with each job
/// given one of 10 ordering keys besides, and each of those ends with one job due and the
/// others waiting behind it.
pub async fn unique_keys_racing_producers(broker: Arc<dyn Broker>) {
    if !enforces_keys(&broker, "unique_keys_racing_producers").await {
        return;
    }
    race_on_unique_keys(&broker, "race", false).await;
    if broker.capabilities().ordered {
        race_on_unique_keys(&broker, "race-ordered", true).await;
    }
}

/// One race of [`unique_keys_racing_producers`] on `queue`, with ordering keys or not.
async fn race_on_unique_keys(broker: &Arc<dyn Broker>, queue: &'static str, ordered: bool) {
    const KEYS: usize = 100;
    let mut tasks = Vec::new();
    for producer in 0..8usize {
        let broker = broker.clone();
        tasks.push(tokio::spawn(async move {
            // A different order per producer: a stride coprime to 100.
            let stride = [1, 3, 7, 9, 11, 13, 17, 19][producer];
            let order: Vec<usize> = (0..KEYS).map(|i| (i * stride + producer) % KEYS).collect();
            let mut answers = Vec::new();
            for chunk in order.chunks(10) {
                let jobs = chunk
                    .iter()
                    .map(|k| {
                        let job =
                            NewJob::new(queue, vec![producer as u8]).unique_key(format!("k{k}"));
                        match ordered {
                            true => job.ordering_key(format!("o{}", k % 10)),
                            false => job,
                        }
                    })
                    .collect();
                let done = broker.enqueue_reported(jobs).await.unwrap();
                answers.extend(chunk.iter().copied().zip(done));
            }
            answers
        }));
    }
    let mut by_key = vec![Vec::<Enqueued>::new(); KEYS];
    for task in tasks {
        for (key, answer) in task.await.unwrap() {
            by_key[key].push(answer);
        }
    }
    for (key, answers) in by_key.iter().enumerate() {
        let stored: Vec<JobId> = answers
            .iter()
            .filter(|a| !a.existing)
            .map(|a| a.id)
            .collect();
        assert_eq!(stored.len(), 1, "{queue}: key k{key}: stored {stored:?}");
        assert!(
            answers.iter().all(|a| a.id == stored[0]),
            "{queue}: key k{key}: every answer names the stored job: {answers:?}"
        );
    }
    let c = counts(broker, queue).await;
    match ordered {
        true => assert_eq!(
            (c.pending, c.scheduled),
            (10, KEYS as u64 - 10),
            "one job per key in the queue: each ordering key's first due, the others waiting"
        ),
        false => assert_eq!(c.pending, KEYS as u64, "one job per key in the queue"),
    }
}

/// A snoozed job goes back to its queue for the delay, its attempt not charged and no
/// error recorded, and runs again once the delay has passed.
pub async fn snooze_is_attempt_neutral(broker: Arc<dyn Broker>) {
    if skip_if_pushed(&broker, "snooze_is_attempt_neutral") {
        return;
    }
    let id = broker
        .enqueue(vec![NewJob::new("q", b"s".to_vec()).max_attempts(1)])
        .await
        .unwrap()[0];
    for round in 1..=3 {
        let held = fetch(&broker, "q", 1, TTL).await;
        assert_eq!(ids(&held.jobs), vec![id], "round {round}");
        assert_eq!(held.jobs[0].attempt, 1, "round {round}: attempt");
        let snooze = Outcome::Snooze {
            delay: Duration::from_secs(30),
        };
        assert_eq!(
            settle(&broker, one(id, held.lease, snooze)).await.applied,
            1
        );
        let rec = record(&broker, id).await;
        assert_eq!(
            (rec.state, rec.job.attempt, rec.last_error, rec.errors.len()),
            (JobState::Pending, 0, None, 0),
            "round {round}: pending, uncharged, no error"
        );
        assert_eq!(
            counts(&broker, "q").await,
            counts_of(0, 1, 0, 0),
            "scheduled"
        );
        advance(Duration::from_secs(29)).await;
        assert!(
            fetch(&broker, "q", 1, TTL).await.jobs.is_empty(),
            "before the delay"
        );
        advance(Duration::from_secs(1)).await;
    }
    let held = fetch(&broker, "q", 1, TTL).await;
    assert_eq!(
        held.jobs[0].attempt, 1,
        "still the first attempt after 3 snoozes"
    );
    settle(&broker, one(id, held.lease, Outcome::Ack)).await;
}
