//! Faults: the server closes the worker's connection while a backlog drains, or an operator
//! deletes the queue under it. The broker reconnects or declares the queue again, the
//! subscription resumes on a new channel, and every job is processed; none is lost.

use std::sync::Arc;
use std::time::Duration;

use hopper_amqp::topology::{dead_queue, retry_bucket, retry_queue};
use hopper_amqp::{AmqpBroker, AmqpOptions};
use hopper_core::worker::STOP_SETTLE_LIMIT;
use hopper_core::{Broker, JobContext, JobError, NewJob, Prefetch, QueueOptions, Worker};

use super::support::{
    Cleanup, FreezingProxy, Seen, Setup, another, enqueue_n, eventually, rabbitmqctl, setup,
    setup_with, wait_for,
};

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

/// Deletes `queues` through a connection of its own, as an operator would.
async fn delete_as_operator(queues: &[String]) {
    let operator = another(AmqpOptions::new()).await;
    operator
        .delete_queues(queues)
        .await
        .unwrap_or_else(|e| panic!("deleting {queues:?}: {e}"));
    operator.close().await;
}

/// A worker on `s.queue` at concurrency 10 and window 50 whose handler records each
/// payload in `seen` and then takes `pause`.
fn recording_worker(s: &Setup, seen: &Arc<Seen>, pause: Duration) -> Worker {
    recording_worker_on(s.dyn_broker(), &s.queue, seen, pause)
}

/// [`recording_worker`] on any broker and queue.
fn recording_worker_on(
    broker: Arc<dyn Broker>,
    queue: &str,
    seen: &Arc<Seen>,
    pause: Duration,
) -> Worker {
    recording_worker_of(broker, &[queue.to_owned()], seen, pause)
}

/// [`recording_worker`] on any broker, working each of `queues` so.
fn recording_worker_of(
    broker: Arc<dyn Broker>,
    queues: &[String],
    seen: &Arc<Seen>,
    pause: Duration,
) -> Worker {
    let mut builder = Worker::builder(broker);
    for queue in queues {
        let seen = seen.clone();
        builder = builder.queue(
            queue,
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
        );
    }
    builder.start().unwrap()
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
    s.dyn_broker().enqueue(jobs(0..BEFORE)).await.unwrap();
    let seen = Arc::new(Seen::default());
    let worker = recording_worker(&s, &seen, Duration::ZERO);
    eventually(30, "the first jobs", || seen.distinct() == BEFORE as usize).await;

    // The worker's subscription declares the queue again: a producer that declares
    // nothing could not publish to it otherwise ("no queue took the message").
    delete_as_operator(std::slice::from_ref(&s.queue)).await;
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
    delete_as_operator(std::slice::from_ref(&s.queue)).await;
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
    delete_as_operator(&[retry_queue(&s.queue, bucket)]).await;
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

/// One enqueue mixes jobs of a queue that was deleted and of one that was not: the server
/// returns only the first kind, each with a confirm that may be another message's. Exactly
/// the returned ones go again: no job is lost and none is published twice.
#[tokio::test]
async fn an_enqueue_mixing_a_deleted_queue_with_a_live_one_publishes_each_job_once() {
    let s = setup("fault_mix").await;
    let other = format!("{}_b", s.queue);
    let _other_cleanup = Cleanup::for_queue(&other);
    let broker = s.dyn_broker();
    let mixed = |n: u64| -> Vec<NewJob> {
        (0..n)
            .map(|i| {
                let queue = if i % 3 == 0 { &s.queue } else { &other };
                NewJob::json(queue, &i).unwrap()
            })
            .collect()
    };
    broker.enqueue(mixed(30)).await.unwrap();
    delete_as_operator(std::slice::from_ref(&s.queue)).await;
    broker
        .enqueue(mixed(300))
        .await
        .expect("the enqueue declares the deleted queue again");
    let (a, b) = (
        broker.counts(&s.queue).await.unwrap().pending,
        broker.counts(&other).await.unwrap().pending,
    );
    assert_eq!(
        (a, b),
        (100, 20 + 200),
        "the deleted queue holds exactly the 100 jobs sent after the deletion, the other \
         its 20 from before and 200 from after"
    );

    // The same with the two queues' jobs in two enqueues at the same moment, five times
    // over: each call publishes on a channel of its own, so a returned message never
    // comes back to the other call.
    for round in 0..5u64 {
        delete_as_operator(std::slice::from_ref(&s.queue)).await;
        let batch = |queue: &str| -> Vec<NewJob> {
            (0..50u64)
                .map(|i| NewJob::json(queue, &(round * 100 + i)).unwrap())
                .collect()
        };
        let (gone, live) = tokio::join!(
            broker.enqueue(batch(&s.queue)),
            broker.enqueue(batch(&other))
        );
        assert_eq!((gone.unwrap().len(), live.unwrap().len()), (50, 50));
        let (a, b) = (
            broker.counts(&s.queue).await.unwrap().pending,
            broker.counts(&other).await.unwrap().pending,
        );
        assert_eq!(
            (a, b),
            (50, 220 + 50 * (round + 1)),
            "round {round}: each job published once"
        );
    }
}

/// The `.dead` queue Hopper declared is deleted; jobs are then dead-lettered. Their copies
/// come back unroutable, so the settlement is retried and the queue declared again: every
/// dead letter lands there (before, each was rejected into the missing queue and dropped).
#[tokio::test]
async fn dead_letters_after_the_dead_queue_was_deleted_land_in_it_declared_again() {
    let s = setup("fault_dead").await;
    let broker = s.dyn_broker();
    enqueue_n(&s.broker, &s.queue, 1).await;
    broker.counts(&s.queue).await.unwrap();
    delete_as_operator(&[dead_queue(&s.queue)]).await;
    enqueue_n(&s.broker, &s.queue, 4).await;
    let worker = Worker::builder(broker.clone())
        .queue(
            &s.queue,
            QueueOptions::new().concurrency(5),
            |_job: JobContext<u64>| async { Err(JobError::discard("no good")) },
        )
        .start()
        .unwrap();
    let stats = wait_for(&worker, 30, "five dead letters", |st| st.dead == 5).await;
    worker.shutdown().await;
    assert_eq!(stats.dead, 5);
    let counts = broker.counts(&s.queue).await.unwrap();
    assert_eq!(
        (counts.pending, counts.dead),
        (0, 5),
        "every dead letter is in the .dead queue declared again"
    );
}

/// An enqueue given up while its confirms were out (its future dropped) must not hand its
/// publishing channel to the next call: a returned message still to come on it would reach
/// that call's confirm, and the next call's own unroutable message would be reported taken.
#[tokio::test]
async fn an_enqueue_given_up_mid_confirm_leaves_nothing_for_the_next_one() {
    let s = setup("fault_cancel").await;
    let broker = s.dyn_broker();
    broker
        .enqueue(vec![NewJob::json(&s.queue, &0u64).unwrap()])
        .await
        .unwrap();
    broker.purge(&s.queue).await.unwrap();
    delete_as_operator(std::slice::from_ref(&s.queue)).await;
    // Polled once (its frames go out on that poll), then dropped.
    let given_up = tokio::time::timeout(
        Duration::ZERO,
        broker.enqueue(vec![NewJob::json(&s.queue, &1u64).unwrap()]),
    )
    .await;
    assert!(given_up.is_err(), "the first enqueue was given up");
    tokio::time::sleep(Duration::from_millis(100)).await;
    broker
        .enqueue(vec![NewJob::json(&s.queue, &2u64).unwrap()])
        .await
        .expect("the next enqueue finds the queue gone and declares it");
    let counts = broker.counts(&s.queue).await.unwrap();
    assert_eq!(
        counts.pending, 1,
        "the job of the next enqueue is in the queue declared again"
    );
}

/// The network to the server goes silent while a worker runs: a frozen proxy keeps the
/// connection open, and nothing comes back. Stopping the worker must not hang on it:
/// closing the subscription waits on the server's reply, and gives up after
/// `STOP_SETTLE_LIMIT`. What the silent server still held goes back to the queue once the
/// connection closes, and a second worker runs it: nothing is lost.
#[tokio::test]
async fn a_stop_does_not_hang_on_a_server_gone_silent() {
    const N: usize = 1000;
    let queue = hopper_testkit::unique_name("hopper_fault_silent");
    let direct = another(AmqpOptions::new().declare(true)).await;
    enqueue_n(&direct, &queue, N).await;
    let _cleanup = Cleanup::for_queue(&queue);
    let proxy = FreezingProxy::start().await;
    let through = AmqpBroker::connect_with(&proxy.url(), AmqpOptions::new().declare(true))
        .await
        .expect("connect through the proxy");
    let seen = Arc::new(Seen::default());
    let worker = recording_worker_on(Arc::new(through), &queue, &seen, Duration::from_millis(5));
    eventually(30, "100 jobs before the freeze", || seen.distinct() >= 100).await;
    proxy.freeze();
    let at_freeze = seen.distinct();
    assert!(
        at_freeze < N,
        "the backlog drained before the freeze; nothing was tested"
    );
    let stopped = tokio::time::timeout(
        Duration::from_secs(60),
        worker.shutdown_with(Duration::from_secs(1)),
    )
    .await;
    assert!(stopped.is_ok(), "the stop hung on the silent server");
    // The server sees the connection close and takes back what it had delivered.
    drop(proxy);
    let worker = recording_worker_on(direct, &queue, &seen, Duration::ZERO);
    eventually(60, "every job after the freeze", || seen.distinct() == N).await;
    worker.shutdown().await;
    eprintln!(
        "{at_freeze} of {N} seen at the freeze; {} runs in all",
        seen.total()
    );
}

/// The server goes silent under a worker of three queues. The stop's settlements (acks,
/// and releases of the deliveries not started) only queue their frames, so they do not
/// wait on it; closing the subscriptions does, each waiting on a reply that never comes,
/// and the stop gives those closes one [`STOP_SETTLE_LIMIT`] for all three together: under
/// the paused clock it takes at least the limit and less than twice it (one limit per
/// queue would make it three; releases waiting on their writes made it the grace and two).
/// Nothing is lost: a worker connected directly runs all 900 jobs afterwards.
#[tokio::test]
async fn a_stop_waits_on_a_silent_server_once_for_all_its_queues() {
    const PER_QUEUE: u64 = 300;
    let queues: Vec<String> = (0..3)
        .map(|q| hopper_testkit::unique_name(&format!("hopper_fault_silent{q}")))
        .collect();
    let _cleanup: Vec<Cleanup> = queues.iter().map(|q| Cleanup::for_queue(q)).collect();
    let direct = another(AmqpOptions::new().declare(true)).await;
    for (q, queue) in queues.iter().enumerate() {
        let jobs = (0..PER_QUEUE)
            .map(|i| NewJob::json(queue, &(q as u64 * 1000 + i)).unwrap())
            .collect();
        direct.enqueue(jobs).await.expect("enqueue");
    }
    let seen = Arc::new(Seen::default());
    let proxy = FreezingProxy::start().await;
    let through = AmqpBroker::connect_with(&proxy.url(), AmqpOptions::new().declare(true))
        .await
        .expect("connect through the proxy");
    let worker = recording_worker_of(Arc::new(through), &queues, &seen, Duration::from_millis(5));
    let started_on = |q: u64| {
        let g = seen.inner.lock().unwrap();
        g.0.range(q * 1000..q * 1000 + PER_QUEUE).count()
    };
    eventually(30, "jobs of every queue before the freeze", || {
        (0..3).all(|q| started_on(q) >= 20)
    })
    .await;
    proxy.freeze();
    assert!(
        seen.distinct() < 3 * PER_QUEUE as usize,
        "the backlog drained before the freeze; nothing was tested"
    );
    const GRACE: Duration = Duration::from_secs(1);
    tokio::time::pause();
    let stopping = tokio::time::Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(60), worker.shutdown_with(GRACE)).await;
    let took = stopping.elapsed();
    tokio::time::resume();
    assert!(stopped.is_ok(), "the stop hung on the silent server");
    assert!(
        took >= STOP_SETTLE_LIMIT && took < 2 * STOP_SETTLE_LIMIT,
        "the stop took {took:?} on the paused clock, with a grace of {GRACE:?} and a limit of {STOP_SETTLE_LIMIT:?}"
    );
    drop(proxy);
    let worker = recording_worker_of(direct, &queues, &seen, Duration::ZERO);
    eventually(60, "every job after the freeze", || {
        seen.distinct() == 3 * PER_QUEUE as usize
    })
    .await;
    worker.shutdown().await;
}
