//! Faults: the server closes the worker's connection while a backlog drains, or an operator
//! deletes the queue under it. The broker reconnects or declares the queue again, the
//! subscription resumes on a new channel, and every job is processed; none is lost.

use std::sync::Arc;
use std::time::Duration;

use hopper_amqp::AmqpOptions;
use hopper_amqp::topology::{retry_bucket, retry_queue};
use hopper_core::{Broker, JobContext, NewJob, Prefetch, QueueOptions, Worker, WorkerHandle};

use super::support::{Seen, Setup, another, enqueue_n, eventually, rabbitmqctl, setup_with};

/// Closes the server-side connections named `name` (only this test's), returning how many.
fn close_connections_named(name: &str) -> Result<usize, String> {
    let list = rabbitmqctl(&[
        "list_connections",
        "-q",
        "--no-table-headers",
        "pid",
        "client_properties",
    ])?;
    let mut closed = 0;
    let quoted = format!("\"{name}\"");
    for line in list.lines() {
        let Some(pid) = line.split_whitespace().next() else {
            continue;
        };
        if line.contains(&quoted) {
            rabbitmqctl(&["close_connection", pid, "test"])?;
            closed += 1;
        }
    }
    Ok(closed)
}

/// A worker on `s.queue` at concurrency 10 and window 50 whose handler records each
/// payload in `seen` and then takes `pause`.
fn recording_worker(s: &Setup, seen: &Arc<Seen>, pause: Duration) -> WorkerHandle {
    let seen = seen.clone();
    Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new()
                .concurrency(10)
                .prefetch(Prefetch::Fixed(50)),
            move |job: JobContext<u64>| {
                seen.record(job.payload);
                async move {
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                    Ok(())
                }
            },
        )
        .start()
        .unwrap()
}

#[tokio::test]
async fn a_connection_closed_by_the_server_is_reopened_and_nothing_is_lost() {
    let name = hopper_testkit::unique_name("hopper_fault_conn");
    let options = AmqpOptions::new()
        .declare(true)
        .connection_name(&name)
        .reconnect(Duration::from_millis(50), Duration::from_millis(500));
    let s = setup_with("fault", options).await;
    const N: usize = 3000;
    enqueue_n(&s.broker, &s.queue, N).await;
    let seen = Arc::new(Seen::default());
    let worker = recording_worker(&s, &seen, Duration::from_millis(2));
    eventually(30, "300 jobs before the fault", || seen.distinct() >= 300).await;
    // rabbitmqctl blocks this thread (and the worker on this runtime) for a second or two.
    let closed = close_connections_named(&name).expect("rabbitmqctl close_connection");
    assert_eq!(closed, 1, "the broker's one connection");
    let at_fault = seen.distinct();
    assert!(
        at_fault < N,
        "the backlog drained before the fault ({at_fault}); nothing was tested"
    );
    eventually(60, "every job after the reconnect", || seen.distinct() == N).await;
    let stats = worker.shutdown().await;
    assert_eq!(seen.distinct(), N, "none lost");
    // Jobs held when the connection dropped ran again (at least once): at most one window.
    let again = seen.total() - N as u64;
    assert!(
        again <= 50 + 10,
        "{again} jobs ran twice, more than the window held"
    );
    assert_eq!(
        stats.completed,
        seen.total(),
        "every run acknowledged or fenced, none failed"
    );
    eprintln!("fault at {at_fault} of {N}: {again} ran twice (held when the connection dropped)");
}

/// An operator deletes the queue a worker consumes; the server cancels the worker's
/// consumer. With topology on, the worker declares the queue again and subscribes again, so a
/// producer that declares nothing can go on enqueueing to it; and an enqueue through a broker
/// that had declared the queue before declares it again instead of failing.
#[tokio::test]
async fn a_queue_deleted_under_a_worker_is_declared_again_and_consumed_again() {
    let options = AmqpOptions::new()
        .declare(true)
        .reconnect(Duration::from_millis(50), Duration::from_millis(500));
    let s = setup_with("fault_del", options).await;
    const BEFORE: u64 = 200;
    const AFTER: u64 = 300;
    let jobs = |range: std::ops::Range<u64>| -> Vec<NewJob> {
        range.map(|i| NewJob::json(&s.queue, &i).unwrap()).collect()
    };
    let delete = || async {
        let operator = another(AmqpOptions::new()).await;
        operator
            .delete_queues(std::slice::from_ref(&s.queue))
            .await
            .expect("delete the queue");
        operator.close().await;
    };
    s.dyn_broker().enqueue(jobs(0..BEFORE)).await.unwrap();
    let seen = Arc::new(Seen::default());
    let worker = recording_worker(&s, &seen, Duration::ZERO);
    eventually(30, "the first jobs", || seen.distinct() == BEFORE as usize).await;

    // The worker's subscription declares the queue again: a producer that declares
    // nothing could not publish to it otherwise ("no queue took the message").
    delete().await;
    let producer = another(AmqpOptions::new()).await;
    let mut refused = 0;
    loop {
        match producer.enqueue(jobs(BEFORE..BEFORE + AFTER)).await {
            Ok(ids) => {
                assert_eq!(ids.len(), AFTER as usize);
                break;
            }
            Err(e) => {
                assert!(e.to_string().contains("no queue took"), "{e}");
                refused += 1;
                assert!(
                    refused < 300,
                    "the worker never declared its queue again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eventually(30, "every job enqueued after the deletion", || {
        seen.distinct() == (BEFORE + AFTER) as usize
    })
    .await;
    let stats = worker.shutdown().await;
    assert_eq!(seen.distinct(), (BEFORE + AFTER) as usize, "none lost");
    assert_eq!(stats.completed, seen.total());
    producer.close().await;

    // No worker now. The first broker declared the queue once and remembers it; once the
    // queue is deleted, its enqueue finds it gone, declares it again and publishes again.
    delete().await;
    let ids = s
        .dyn_broker()
        .enqueue(jobs(0..50))
        .await
        .expect("an enqueue after the deletion declares the queue again");
    assert_eq!(ids.len(), 50);
    let counts = s.dyn_broker().counts(&s.queue).await.unwrap();
    assert_eq!(counts.pending, 50, "all 50 in the queue declared again");

    // The same for a delayed job's retry queue.
    let delayed = |i: u64| {
        NewJob::json(&s.queue, &i)
            .unwrap()
            .delay(Duration::from_secs(60))
    };
    s.dyn_broker().enqueue(vec![delayed(1)]).await.unwrap();
    let bucket = retry_bucket(Duration::from_secs(60)).expect("a delay has a bucket");
    let operator = another(AmqpOptions::new()).await;
    operator
        .delete_queues(&[retry_queue(&s.queue, bucket)])
        .await
        .expect("delete the retry queue");
    operator.close().await;
    s.dyn_broker()
        .enqueue(vec![delayed(2)])
        .await
        .expect("a delayed enqueue after the deletion declares the retry queue again");
    let counts = s.dyn_broker().counts(&s.queue).await.unwrap();
    assert_eq!(
        (counts.pending, counts.scheduled),
        (50, 1),
        "the second delayed job waits; the first went with its deleted queue"
    );
    eprintln!("the producer was refused {refused} times before the worker declared the queue");
}
