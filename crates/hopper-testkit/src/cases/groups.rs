//! Groups, counted by the broker ([`hopper_core::group`]): the completion job is enqueued
//! once, when the group is sealed and every member has settled, and tells how they did.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::group::GroupOutcome;
use hopper_core::{Broker, Error, JobId, NewJob, Outcome, Selection, Settlement};
use tokio::time::advance;

use super::{counts, settle};
use crate::helpers::{TTL, enqueue, fetch, skip};

fn member(queue: &str, group: &str, name: &str) -> NewJob {
    NewJob::new(queue, name.as_bytes().to_vec()).group(group)
}

fn completion() -> NewJob {
    NewJob::new("done", b"report".to_vec()).header("mine", "kept")
}

/// Says whether the broker counts groups; when it does not, checks that it refuses a
/// member, storing nothing, and a seal.
async fn counts_groups(broker: &Arc<dyn Broker>, case: &str) -> bool {
    if broker.capabilities().groups {
        return true;
    }
    let refused = broker
        .enqueue(vec![
            NewJob::new("q", b"plain".to_vec()),
            member("q", "g", "m"),
        ])
        .await;
    assert!(
        matches!(refused, Err(Error::NotSupported { .. })),
        "a broker without Capabilities::groups must refuse a member: {refused:?}"
    );
    assert_eq!(counts(broker, "q").await.pending, 0, "stored none");
    let seal = broker.seal_group("g", completion()).await;
    assert!(matches!(seal, Err(Error::NotSupported { .. })), "{seal:?}");
    skip(
        case,
        "needs Capabilities::groups (checked: refused, nothing stored)",
    );
    false
}

fn refused_by(result: hopper_core::Result<impl std::fmt::Debug>, setting: &str) {
    match result {
        Err(Error::Config(e)) => assert_eq!(e.setting, setting, "{e}"),
        other => panic!("expected a refusal naming {setting}: {other:?}"),
    }
}

/// The only job of `done`, claimed: the completion job, with its outcome.
async fn claim_completion(broker: &Arc<dyn Broker>) -> (JobId, GroupOutcome) {
    let held = fetch(broker, "done", 10, TTL).await;
    assert_eq!(held.jobs.len(), 1, "one completion job");
    let job = &held.jobs[0];
    assert_eq!(
        (job.payload.as_slice(), job.headers["mine"].as_str()),
        (&b"report"[..], "kept")
    );
    let outcome = GroupOutcome::of(job).expect("a completion job carries its outcome");
    settle(
        broker,
        vec![Settlement {
            job: job.id,
            lease: held.lease,
            outcome: Outcome::Ack,
        }],
    )
    .await;
    (job.id, outcome)
}

/// Members enqueued in two batches settle every way there is; only completions, deaths and
/// cancels count, and the completion job is enqueued once, when the sealed group's last
/// member settles, with the counts in its headers. A sealed group takes no more members
/// and no second seal; a dead member re-driven is not counted again; an empty group
/// completes at its seal; cancels, purges and expiries on the last attempt count.
pub async fn groups(broker: Arc<dyn Broker>) {
    if !counts_groups(&broker, "groups").await {
        return;
    }
    assert_eq!(broker.group("g").await.unwrap(), None, "never heard of");
    let first = enqueue(
        &broker,
        (0..3).map(|i| member("q", "g", &format!("a{i}"))).collect(),
    )
    .await;
    let mut second: Vec<NewJob> = (0..3).map(|i| member("q", "g", &format!("b{i}"))).collect();
    second.push(NewJob::new("q", b"plain".to_vec()));
    let second = enqueue(&broker, second).await;
    let status = broker.group("g").await.unwrap().expect("the group");
    assert_eq!(
        (status.members, status.unsettled(), status.sealed),
        (6, 6, false)
    );

    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(held.jobs.len(), 7);
    let zero = Duration::ZERO;
    let how = |id: JobId| {
        let error = "boom".to_string();
        match id {
            _ if id == first[0] => Outcome::Ack,
            _ if id == first[1] => Outcome::DeadLetter { error },
            _ if id == first[2] => Outcome::Retry {
                delay: zero,
                error,
                step_aside: false,
            },
            _ if id == second[0] => Outcome::Cancel,
            _ if id == second[1] => Outcome::Release,
            _ if id == second[2] => Outcome::Snooze { delay: zero },
            _ => Outcome::Ack,
        }
    };
    let settled = held
        .jobs
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: held.lease,
            outcome: how(j.id),
        })
        .collect();
    settle(&broker, settled).await;
    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!(
        (
            status.succeeded,
            status.dead.clone(),
            status.cancelled,
            status.unsettled()
        ),
        (1, vec![first[1]], 1, 3),
        "a retry, a release and a snooze settle nothing"
    );

    let sealed = broker.seal_group("g", completion()).await.unwrap();
    assert_eq!(
        (sealed.sealed, sealed.completion),
        (true, None),
        "3 still to settle"
    );
    refused_by(
        broker.enqueue(vec![member("q", "g", "late")]).await,
        "group",
    );
    refused_by(broker.seal_group("g", completion()).await, "group");
    assert_eq!(
        counts(&broker, "q").await.pending,
        3,
        "the late member was not stored"
    );

    let redrive = broker.capabilities().admin.redrive;
    if redrive {
        let back = broker
            .retry_dead(&Selection::Jobs(vec![first[1]]))
            .await
            .unwrap();
        assert_eq!(back, 1, "the dead member goes back");
    }
    let held = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(held.jobs.len(), 3 + usize::from(redrive));
    let last = second[2];
    let (rest, tail): (Vec<_>, Vec<_>) = held.jobs.iter().partition(|j| j.id != last);
    let acks = rest
        .iter()
        .map(|j| Settlement {
            job: j.id,
            lease: held.lease,
            outcome: Outcome::Ack,
        })
        .collect();
    settle(&broker, acks).await;
    assert_eq!(counts(&broker, "done").await.pending, 0, "one member to go");
    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!(
        status.succeeded, 3,
        "the re-driven member was counted when it died"
    );
    let error = "boom".to_string();
    let dies = Settlement {
        job: tail[0].id,
        lease: held.lease,
        outcome: Outcome::DeadLetter { error },
    };
    settle(&broker, vec![dies]).await;

    let status = broker.group("g").await.unwrap().unwrap();
    assert_eq!(status.dead, vec![first[1], last], "which died, in order");
    let (done, outcome) = claim_completion(&broker).await;
    assert_eq!(status.completion, Some(done));
    assert_eq!(
        (
            outcome.group.as_str(),
            outcome.members,
            outcome.succeeded,
            outcome.dead,
            outcome.cancelled
        ),
        ("g", 6, 3, 2, 1)
    );

    // Cancelled and purged members count; so does a member whose lease expired on its
    // last attempt.
    let h = enqueue(
        &broker,
        vec![
            member("q4", "h", "h0"),
            member("q2", "h", "h1"),
            member("q3", "h", "h2").max_attempts(1),
        ],
    )
    .await;
    broker.seal_group("h", completion()).await.unwrap();
    broker.cancel(h[0]).await.unwrap();
    assert_eq!(broker.purge("q2").await.unwrap(), 1);
    assert_eq!(
        fetch(&broker, "q3", 10, Duration::from_secs(1))
            .await
            .jobs
            .len(),
        1
    );
    assert_eq!(counts(&broker, "done").await.pending, 0, "h2 still runs");
    advance(Duration::from_secs(5)).await;
    assert!(
        fetch(&broker, "q3", 10, TTL).await.jobs.is_empty(),
        "h2 died"
    );
    let (_, outcome) = claim_completion(&broker).await;
    assert_eq!(
        (outcome.members, outcome.dead, outcome.cancelled),
        (3, 1, 2)
    );

    // An empty group completes at its seal.
    let empty = broker.seal_group("empty", completion()).await.unwrap();
    assert!(empty.completion.is_some(), "completed at once");
    let (_, outcome) = claim_completion(&broker).await;
    assert_eq!((outcome.group.as_str(), outcome.members), ("empty", 0));

    refused_by(broker.group("").await, "group");
    refused_by(broker.enqueue(vec![member("q", "", "x")]).await, "group");
    refused_by(
        broker
            .enqueue(vec![member("q", "k", "x").unique_key("u")])
            .await,
        "group",
    );
    refused_by(
        broker.seal_group("k", member("done", "other", "x")).await,
        "completion",
    );
    assert_eq!(
        counts(&broker, "done").await.pending,
        0,
        "nothing more completed"
    );
}
