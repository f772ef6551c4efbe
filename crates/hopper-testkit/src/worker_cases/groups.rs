//! Groups through real workers: the completion job runs once, whatever becomes of the
//! members and of the workers running them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::group::GroupOutcome;
use hopper_core::{JobContext, JobError, NewJob, QueueOptions};
use tokio::time::Instant;

use super::stop::Doomed;
use super::{PATIENCE, Runs, Target, builder, skip_for};

const MEMBERS: u64 = 120;

/// What member `i` does: every tenth dies at once; every seventh otherwise fails its first
/// attempt and succeeds on the next; the rest succeed.
fn member_outcome(i: u64, attempt: u32) -> Result<(), JobError> {
    if i % 10 == 0 {
        return Err(JobError::discard(format!("member {i} cannot succeed")));
    }
    if i % 7 == 0 && attempt == 1 {
        return Err(JobError::retry_after("flaky", Duration::from_millis(20)));
    }
    Ok(())
}

/// A group of 120 members, sealed with a completion job. A worker holding 6 members dies
/// without settling them; 3 workers of 4 slots run the rest, every tenth member dying and
/// every seventh failing once. The completion job runs exactly once, after every member
/// settled, and reads 108 succeeded and 12 dead; the broker names the 12.
pub async fn group_completes_once(target: Target) {
    let Target {
        broker,
        connect,
        queue,
    } = target;
    let caps = broker.capabilities();
    if !caps.groups || !caps.leases {
        return skip_for(
            "group_completes_once",
            "groups",
            "the broker counts members as they settle (and leases bring back a dead \
             worker's members)",
        );
    }
    let done = format!("{queue}-done");
    let members = (0..MEMBERS)
        .map(|i| NewJob::json(&queue, &i))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let completion = NewJob::json(&done, "report").unwrap();
    let sealed = broker
        .enqueue_group("g", members, completion)
        .await
        .unwrap();
    assert_eq!((sealed.members, sealed.sealed), (MEMBERS, true));

    let mut doomed = Doomed::start(connect, queue.clone());
    let held = doomed.holding().await;
    let started = doomed.kill().await;
    assert_eq!(
        (held, started.len()),
        (6, 4),
        "held and started by the dead worker"
    );

    let runs = Runs::default();
    let completions = Arc::new(Mutex::new(Vec::<(u32, GroupOutcome, Instant)>::new()));
    let ended = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (seen, told, last) = (runs.clone(), completions.clone(), ended.clone());
            builder(&broker)
                .queue(
                    queue.clone(),
                    QueueOptions::new().concurrency(4),
                    move |job: JobContext<u64>| {
                        seen.record(&job);
                        let result = member_outcome(job.payload, job.job.attempt);
                        last.lock().unwrap().push(Instant::now());
                        async move { result }
                    },
                )
                .queue(
                    done.clone(),
                    QueueOptions::new().concurrency(1),
                    move |job: JobContext<serde_json::Value>| {
                        let outcome = GroupOutcome::of(&job.job).expect("the group's outcome");
                        told.lock()
                            .unwrap()
                            .push((job.job.attempt, outcome, Instant::now()));
                        async { Ok(()) }
                    },
                )
                .start()
                .expect("start a worker")
        })
        .collect();
    let deadline = Instant::now() + PATIENCE;
    while completions.lock().unwrap().is_empty() {
        if Instant::now() > deadline {
            let status = broker.group("g").await;
            let left = broker.counts(&queue).await;
            panic!("the completion job never ran: {status:?}, members {left:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Long enough for a second completion job, were one enqueued, to run.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for w in workers {
        w.shutdown().await;
    }
    let completions = completions.lock().unwrap().clone();
    assert_eq!(
        completions.len(),
        1,
        "the completion job ran once: {completions:?}"
    );
    let (attempt, outcome, ran) = &completions[0];
    assert_eq!(*attempt, 1);
    let last_member = *ended.lock().unwrap().iter().max().expect("members ran");
    assert!(
        last_member <= *ran,
        "the completion ran before the last member ended"
    );
    assert_eq!(
        (
            outcome.members,
            outcome.succeeded,
            outcome.dead,
            outcome.cancelled
        ),
        (MEMBERS, 108, 12, 0)
    );

    let attempts = runs.attempts();
    assert_eq!(attempts.len(), MEMBERS as usize, "every member ran here");
    for p in &started {
        assert_eq!(
            attempts[p][0], 2,
            "member {p} came back from the dead worker charged"
        );
    }
    let status = broker.group("g").await.unwrap().expect("the group");
    assert_eq!(status.unsettled(), 0);
    let mut dead_payloads = Vec::new();
    for id in &status.dead {
        let record = broker
            .job(*id)
            .await
            .unwrap()
            .expect("a dead member's record");
        let payload: u64 = serde_json::from_slice(&record.job.payload).unwrap();
        dead_payloads.push(payload);
    }
    dead_payloads.sort();
    let expected: Vec<u64> = (0..MEMBERS).filter(|i| i % 10 == 0).collect();
    assert_eq!(
        dead_payloads, expected,
        "the members that died, by the broker"
    );
}
