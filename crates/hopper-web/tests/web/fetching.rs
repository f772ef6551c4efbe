//! How a worker fetched, as the server follows its reports: every fetch it made is on the
//! queue's track, in order, starting from a window of one under the adaptive prefetch.

use std::time::{Duration, Instant};

use hopper::{JobContext, NewJob, Prefetch, QueueOptions, Worker};

use super::support::{get, sqlite, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_fetches_are_followed_in_order() {
    let (broker, dir) = sqlite("fetching").await;
    let jobs = (0..300u64)
        .map(|i| NewJob::json("auto", &i).unwrap())
        .collect();
    broker.enqueue(jobs).await.unwrap();
    let server = start(broker.clone(), None, false).await;
    let worker = Worker::builder(broker.clone())
        .heartbeat(Duration::from_millis(500))
        .queue(
            "auto",
            QueueOptions::new().concurrency(8).prefetch(Prefetch::Auto),
            |_job: JobContext<u64>| async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(())
            },
        )
        .start()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while worker.stats().completed < 300 {
        assert!(Instant::now() < deadline, "{:?}", worker.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fetched = worker.stats().fetched_jobs;
    // Every fetch is reported within a report or two, and the server follows each report.
    // Reports every 500 ms: the 120 points the server keeps span a minute, longer than the
    // drain and this wait, however slow a loaded machine makes them.
    let tracks = loop {
        let tracks = get(&server, "/api/queues/auto/fetching", &[]).await.json();
        let sizes: Vec<u64> = tracks[0]["points"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| {
                p["fetches"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_u64().unwrap())
            })
            .collect();
        if sizes.iter().sum::<u64>() == fetched {
            break (tracks, sizes);
        }
        if Instant::now() > deadline {
            let workers = get(&server, "/api/workers", &[]).await.body;
            panic!("followed {sizes:?}, fetched {fetched}; workers {workers}; tracks {tracks}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (tracks, sizes) = tracks;
    assert_eq!(tracks.as_array().unwrap().len(), 1, "one worker");
    assert_eq!(sizes[0], 1, "Auto starts with a window of one: {sizes:?}");
    let windows: Vec<u64> = tracks[0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["window"].as_u64().unwrap())
        .collect();
    assert!(
        windows.iter().any(|&w| w > 1),
        "the window grew: {windows:?}"
    );
    let page = get(&server, "/queues/auto", &[]).await;
    assert!(
        page.body.contains("data-worker="),
        "the page shows the track"
    );
    assert!(
        page.body.contains("Latest fetches, in order"),
        "{}",
        page.body
    );
    worker.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A worker holding a job reports when its earliest lease expires: after its report and
/// within the lease's time of it; the workers page shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_holding_a_job_shows_its_lease_expiry() {
    let (broker, dir) = sqlite("lease-expiry").await;
    broker
        .enqueue(vec![NewJob::json("slow", &1u64).unwrap()])
        .await
        .unwrap();
    let server = start(broker.clone(), None, false).await;
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let open = gate.clone();
    let worker = Worker::builder(broker.clone())
        .heartbeat(Duration::from_millis(200))
        .lease_ttl(Duration::from_secs(10))
        .queue(
            "slow",
            QueueOptions::new().concurrency(1),
            move |_job: JobContext<u64>| {
                let gate = gate.clone();
                async move {
                    gate.notified().await;
                    Ok(())
                }
            },
        )
        .start()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (lease, reported) = loop {
        let workers = get(&server, "/api/workers", &[]).await.json();
        let w = &workers[0];
        if let Some(at) = w["queues"][0]["lease_expires_at"].as_i64() {
            break (at, w["heartbeat_at"].as_i64().unwrap());
        }
        assert!(Instant::now() < deadline, "no lease reported: {workers}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        lease > reported - 10_000 && lease <= reported + 10_000,
        "lease expiry {lease} within 10 s of the report at {reported}"
    );
    // The page shows the workers as the server last followed them, which may be a report
    // from before the fetch: it shows the lease a report or two later.
    loop {
        let page = get(&server, "/workers", &[]).await.body;
        if page.contains(r#"<td class="lease">"#) && !page.contains("no lease held") {
            break;
        }
        assert!(Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    open.notify_one();
    let stats = worker.shutdown().await;
    assert_eq!(stats.completed, 1);
    let _ = std::fs::remove_dir_all(dir);
}
