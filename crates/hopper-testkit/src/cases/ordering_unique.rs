//! Jobs with both a unique key and an ordering key: the unique key decides whether a job
//! is stored, and a stored one takes its place on its ordering key like any other.

use std::sync::Arc;

use hopper_core::{Broker, Enqueued, JobId, NewJob, Outcome};

use super::{one, record, settle};
use crate::helpers::{TTL, fetch, ids};

fn job(name: &str, unique: Option<&str>, key: Option<&str>) -> NewJob {
    let mut job = NewJob::new("q", name.as_bytes().to_vec());
    if let Some(unique) = unique {
        job = job.unique_key(unique);
    }
    if let Some(key) = key {
        job = job.ordering_key(key);
    }
    job
}

/// Fetches `q`, checks it gives exactly `expected`, and acknowledges them.
async fn runs(broker: &Arc<dyn Broker>, expected: &[JobId], why: &str) {
    let held = fetch(broker, "q", 10, TTL).await;
    assert_eq!(ids(&held.jobs), expected, "{why}");
    for id in expected {
        settle(broker, one(*id, held.lease, Outcome::Ack)).await;
    }
}

/// A batch mixing unique keys and ordering keys, and jobs with both: a duplicate answers
/// its holder and takes no place on its ordering key (which may differ from its holder's), so the job of the key after it
/// neither waits behind it nor runs beside the key's head; the stored jobs run one at a
/// time per key, in enqueue order.
pub async fn unique_and_ordering_keys(broker: Arc<dyn Broker>) {
    let caps = broker.capabilities();
    if !(caps.unique && caps.ordered) {
        // Brokers without one of them refuse it: `unique_keys`, `ordered_keys`.
        return;
    }
    let first = broker
        .enqueue_reported(vec![
            job("a1", Some("x"), Some("a")),
            job("a2", None, Some("a")),
            job("x again", Some("x"), Some("a")),
            job("u", Some("y"), None),
            job("b1", Some("z"), Some("b")),
            job("x on e", Some("x"), Some("e")),
            job("e1", None, Some("e")),
        ])
        .await
        .unwrap();
    let [a1, a2, dup, u, b1, dup_e, e1] = first[..] else {
        unreachable!()
    };
    assert_eq!(dup, Enqueued::existing(a1.id), "x twice in one batch");
    assert_eq!(
        dup_e,
        Enqueued::existing(a1.id),
        "x again, on another ordering key"
    );
    assert!(![a1, a2, u, b1, e1].iter().any(|e| e.existing));
    assert!(!record(&broker, e1.id).await.blocked, "e1 waits for no one");
    let rec = record(&broker, a1.id).await;
    assert_eq!(
        (
            rec.unique_key.as_deref(),
            rec.ordering_key.as_deref(),
            rec.blocked
        ),
        (Some("x"), Some("a"), false),
        "a1 keeps both keys"
    );
    assert!(record(&broker, a2.id).await.blocked, "a2 waits for a1");

    // Duplicates first on their ordering keys: c1 is a duplicate of y (held by u), so c2
    // is its key's head; a3, a duplicate of x, leaves a4 behind a2.
    let second = broker
        .enqueue_reported(vec![
            job("c1", Some("y"), Some("c")),
            job("c2", None, Some("c")),
            job("a3", Some("x"), Some("a")),
            job("a4", Some("w"), Some("a")),
        ])
        .await
        .unwrap();
    let [c1, c2, a3, a4] = second[..] else {
        unreachable!()
    };
    assert_eq!(
        (c1, a3),
        (Enqueued::existing(u.id), Enqueued::existing(a1.id))
    );
    assert!(!c2.existing && !a4.existing);
    assert!(!record(&broker, c2.id).await.blocked, "c2 waits for no one");
    assert!(record(&broker, a4.id).await.blocked, "a4 waits");

    runs(
        &broker,
        &[a1.id, u.id, b1.id, e1.id, c2.id],
        "the heads and u",
    )
    .await;
    runs(&broker, &[a2.id], "a2 after a1").await;
    runs(&broker, &[a4.id], "a4 after a2").await;
    assert!(fetch(&broker, "q", 10, TTL).await.jobs.is_empty());
    // x is free again: a job with it is stored, and heads its empty key.
    let again = broker
        .enqueue_reported(vec![job("a5", Some("x"), Some("a"))])
        .await
        .unwrap();
    assert!(!again[0].existing);
    runs(&broker, &[again[0].id], "a5").await;
}
