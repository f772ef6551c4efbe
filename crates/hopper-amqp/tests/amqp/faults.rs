//! The server closes the worker's connection while a backlog drains: the broker reconnects,
//! the subscription resumes on a new channel, and every job is processed; none is lost.

use std::sync::Arc;
use std::time::Duration;

use hopper_amqp::AmqpOptions;
use hopper_core::{JobContext, Prefetch, QueueOptions, Worker};

use super::support::{Seen, enqueue_n, eventually, rabbitmqctl, setup_with};

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
    let seen2 = seen.clone();
    let worker = Worker::builder(s.dyn_broker())
        .queue(
            &s.queue,
            QueueOptions::new()
                .concurrency(10)
                .prefetch(Prefetch::Fixed(50)),
            move |job: JobContext<u64>| {
                seen2.record(job.payload);
                async {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
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
