//! The dashboard in a real browser: Debian's Chromium, headless, driven through
//! chromedriver (packages `chromium` and `chromium-driver`, which `.ci/run` installs when
//! missing), on SQLite and on PostgreSQL brokers holding jobs in every state.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hopper::broker::FetchRequest;
use hopper::{Broker, JobContext, JobId, NewJob, QueueOptions, Schedule, Worker};

use super::support::{Server, dead_letter, sqlite, start};

/// Chromium under chromedriver on a port of its own; the driver is killed when dropped.
struct Browser {
    client: Client,
    driver: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

async fn browser() -> Browser {
    let port = free_port();
    let driver = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian's chromium-driver, which .ci/run installs)");
    let caps = serde_json::json!({
        "goog:chromeOptions": {
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1000"],
        }
    });
    let caps = caps.as_object().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let attempt = ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await;
        match attempt {
            Ok(client) => return Browser { client, driver },
            Err(e) if Instant::now() > deadline => panic!("chromedriver did not answer: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

impl Browser {
    /// Clicks the element with id `id` on the current page.
    async fn click(&self, id: &str) {
        let button = self.client.find(Locator::Id(id)).await.unwrap();
        button.click().await.unwrap();
    }

    /// The job ids of the current page's job rows, in order.
    async fn listed(&self) -> Vec<i64> {
        let rows = self
            .client
            .find_all(Locator::Css("#jobs tbody tr"))
            .await
            .unwrap();
        let mut ids = Vec::with_capacity(rows.len());
        for row in rows {
            let id = row.attr("data-id").await.unwrap().expect("a data-id");
            ids.push(id.parse().unwrap());
        }
        ids
    }
}

/// Waits up to 30 s for `done`.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Saves a screenshot of the current page as a test artefact in
/// `target/tmp/screenshots`. With `HOPPER_UPDATE_SCREENSHOTS=1`, the SQLite scenario's
/// shots also replace README's in `docs/screenshots`.
async fn shot(b: &Browser, name: &str) {
    let png = b.client.screenshot().await.unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    let update = std::env::var_os("HOPPER_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1");
    if let (true, Some(page)) = (update, name.strip_prefix("sqlite-")) {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
        std::fs::write(docs.join(format!("{page}.png")), &png).unwrap();
    }
}

/// A job whose payload is `text` as a JSON string, as the worker's handler decodes it.
fn job(queue: &str, text: impl Into<String>) -> NewJob {
    NewJob::json(queue, &text.into()).unwrap()
}

/// Queue `mail`: 2 dead, 3 pending (one with an HTML payload), 1 scheduled, 1 cancelled;
/// queue `held`: 1 leased. Returns the HTML job's id and the dead ids.
async fn fill(broker: &Arc<dyn Broker>) -> (JobId, Vec<JobId>) {
    let dead = broker
        .enqueue(vec![job("mail", "d1"), job("mail", "d2")])
        .await
        .unwrap();
    let died = dead_letter(broker, "mail", 2, |id| format!("smtp refused {id}")).await;
    assert_eq!(died, 2);
    let ids = broker
        .enqueue(vec![
            job("mail", "<script>alert('owned')</script>"),
            job("mail", "two"),
            job("mail", "three"),
            job("mail", "later").delay(Duration::from_secs(3600)),
            job("mail", "never"),
            job("held", "held"),
        ])
        .await
        .unwrap();
    broker.cancel(ids[4]).await.unwrap();
    broker
        .fetch(FetchRequest::one("held", 1, Duration::from_secs(600)))
        .await
        .unwrap();
    (ids[0], dead)
}

/// The whole scenario on `broker`, screenshots named after `name`.
async fn scenario(broker: Arc<dyn Broker>, name: &str) {
    let (html_job, dead) = fill(&broker).await;
    let server: Server = start(broker.clone(), None, false).await;
    let base = format!("http://{}", server.addr);
    let b = browser().await;

    // The overview's counts are the broker's.
    b.client.goto(&format!("{base}/")).await.unwrap();
    let rows = b
        .client
        .find_all(Locator::Css("#queues tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "mail and held");
    for row in rows {
        let queue = row.attr("data-queue").await.unwrap().unwrap();
        let counts = broker.queue_stats(&queue).await.unwrap().counts;
        let mut shown = Vec::new();
        for state in ["pending", "scheduled", "leased", "dead"] {
            let cell = row
                .find(Locator::Css(&format!("td.{state}")))
                .await
                .unwrap();
            shown.push(cell.text().await.unwrap().parse::<u64>().unwrap());
        }
        assert_eq!(
            shown,
            [counts.pending, counts.scheduled, counts.leased, counts.dead],
            "{queue}"
        );
    }

    // An HTML payload is text, and runs nothing.
    b.client
        .goto(&format!("{base}/jobs/{}", html_job.0))
        .await
        .unwrap();
    let payload = b.client.find(Locator::Id("payload")).await.unwrap();
    assert_eq!(
        payload.text().await.unwrap(),
        r#""<script>alert('owned')</script>""#,
        "the JSON string as text, quotes and all"
    );
    assert!(b.client.get_alert_text().await.is_err(), "no alert opened");
    shot(&b, &format!("{name}-job")).await;
    b.client.set_window_size(390, 844).await.unwrap();
    shot(&b, &format!("{name}-job-phone")).await;
    b.client.set_window_size(1280, 1000).await.unwrap();

    // A dead job retried from its page becomes pending, and a running worker completes it.
    let ran = Arc::new(Mutex::new(Vec::<i64>::new()));
    let seen = ran.clone();
    let worker = Worker::builder(broker.clone())
        .poll_interval(Duration::from_millis(100))
        .heartbeat(Duration::from_millis(200))
        .schedule(
            Schedule::every("digest", Duration::from_secs(3600), job("digests", "d")).unwrap(),
        )
        .queue(
            "mail",
            QueueOptions::new().concurrency(2),
            move |job: JobContext<String>| {
                seen.lock().unwrap().push(job.job.id.0);
                async { Ok(()) }
            },
        )
        .start()
        .unwrap();
    b.client
        .goto(&format!("{base}/queues/mail?state=dead"))
        .await
        .unwrap();
    shot(&b, &format!("{name}-dead")).await;
    b.client
        .goto(&format!("{base}/jobs/{}", dead[0].0))
        .await
        .unwrap();
    b.click("retry").await;
    eventually("the retried job to run", async || {
        ran.lock().unwrap().contains(&dead[0].0)
    })
    .await;
    assert!(
        !ran.lock().unwrap().contains(&dead[1].0),
        "the other dead letter stayed dead"
    );

    // The workers page lists the running worker by its pid, taking `mail` with 2 slots.
    let pid = std::process::id().to_string();
    eventually("the worker on the workers page", async || {
        b.client.goto(&format!("{base}/workers")).await.unwrap();
        let Ok(rows) = b.client.find_all(Locator::Css("#workers tbody tr")).await else {
            return false;
        };
        for row in rows {
            if row.attr("data-pid").await.unwrap().as_deref() != Some(pid.as_str()) {
                continue;
            }
            let taken = row.find(Locator::Css("div.taken")).await.unwrap();
            let queue = taken.attr("data-queue").await.unwrap();
            let slots = taken.attr("data-slots").await.unwrap();
            return queue.as_deref() == Some("mail") && slots.as_deref() == Some("2");
        }
        false
    })
    .await;
    // And its schedule, held by one worker, with its next slot on the hour.
    let schedule = b
        .client
        .find(Locator::Css("#schedules tr[data-schedule=digest]"))
        .await
        .unwrap();
    let cells = schedule.find_all(Locator::Css("td")).await.unwrap();
    let mut texts = Vec::new();
    for c in cells {
        texts.push(c.text().await.unwrap());
    }
    assert_eq!(
        (texts[1].as_str(), texts[2].as_str(), texts[5].as_str()),
        ("digests", "every 3600s", "1"),
        "{texts:?}"
    );
    assert!(
        texts[3].ends_with(":00:00 UTC"),
        "next slot on the hour: {texts:?}"
    );
    shot(&b, &format!("{name}-workers")).await;
    // The overview again, now with throughput and a live worker to show.
    b.client.goto(&format!("{base}/")).await.unwrap();
    shot(&b, &format!("{name}-overview")).await;

    // Pausing from the page stops the worker within two seconds; resuming starts it again.
    b.client.goto(&format!("{base}/queues/mail")).await.unwrap();
    b.click("pause").await;
    eventually("the pause", async || {
        broker.queue_stats("mail").await.unwrap().paused
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = broker
        .enqueue((0..5).map(|i| job("mail", format!("p{i}"))).collect())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let taken = |ids: &[JobId]| {
        ids.iter()
            .filter(|id| ran.lock().unwrap().contains(&id.0))
            .count()
    };
    assert_eq!(taken(&later), 0, "the paused queue was taken from");
    shot(&b, &format!("{name}-paused")).await;
    b.click("resume").await;
    eventually("the jobs after the resume", async || taken(&later) == 5).await;
    worker.shutdown().await;

    // Paging through 100,000 jobs.
    let mut bulk = Vec::with_capacity(100_000);
    for chunk in 0..100 {
        let jobs = (0..1000)
            .map(|i| job("bulk", format!("{}", chunk * 1000 + i)))
            .collect();
        bulk.extend(broker.enqueue(jobs).await.unwrap());
    }
    b.client.goto(&format!("{base}/queues/bulk")).await.unwrap();
    let mut listed = Vec::new();
    for page in 0..4 {
        let ids = b.listed().await;
        assert_eq!(ids.len(), 50, "page {page}");
        listed.extend(ids);
        b.click("next").await;
        b.client
            .wait()
            .for_element(Locator::Css("#jobs"))
            .await
            .unwrap();
    }
    let expected: Vec<i64> = bulk[..200].iter().map(|id| id.0).collect();
    assert_eq!(listed, expected, "four pages in order, none repeated");
    let deep = broker.job(bulk[99_949]).await.unwrap().unwrap().job;
    let cursor = format!("{}.{}.{}", deep.priority, deep.run_at, deep.id.0);
    b.client
        .goto(&format!("{base}/queues/bulk?after={cursor}"))
        .await
        .unwrap();
    let last = b.listed().await;
    let expected: Vec<i64> = bulk[99_950..].iter().map(|id| id.0).collect();
    assert_eq!(last, expected, "the last page, read at the 99,950th job");
    shot(&b, &format!("{name}-bulk")).await;
    b.click("next").await;
    b.client
        .wait()
        .for_element(Locator::Id("no-jobs"))
        .await
        .unwrap();

    let Browser { client, .. } = &b;
    client.clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_browser_on_sqlite() {
    let (broker, dir) = sqlite("browser").await;
    scenario(broker, "sqlite").await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Drops a PostgreSQL schema when dropped, whether the test passed or not.
struct DropSchema(String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc"])
            .arg(format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0))
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_browser_on_postgres() {
    let schema = format!("hopper_web_browser_{}", std::process::id());
    let _drop = DropSchema(schema.clone());
    let base = std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let url = format!("{base}?schema={schema}");
    hopper::migrate(&url).await.unwrap();
    scenario(hopper::connect(&url).await.unwrap(), "postgres").await;
}

/// A queue page left open in the browser, refreshing itself every 5 s, costs the broker
/// at most one call a second, the server's following of the workers included: counted at
/// the broker's door, on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_page_costs_at_most_a_query_a_second() {
    let schema = format!("hopper_web_page_{}", std::process::id());
    let _drop = DropSchema(schema.clone());
    let base = std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let url = format!("{base}?schema={schema}");
    hopper::migrate(&url).await.unwrap();
    let broker = hopper::connect(&url).await.unwrap();
    broker
        .enqueue((0..20).map(|i| job("q", format!("{i}"))).collect())
        .await
        .unwrap();
    let counted = Arc::new(hopper_testkit::WithCleanup::new(broker, || {}));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = hopper_web::ServeOptions {
        bind: addr,
        token: None,
        read_only: false,
        metrics: None,
        follow_every: hopper::registry::HEARTBEAT_EVERY,
    };
    let serving: Arc<dyn Broker> = counted.clone();
    tokio::spawn(hopper_web::serve_on(
        listener,
        serving,
        options,
        std::future::pending(),
    ));
    let b = browser().await;
    b.client
        .goto(&format!("http://{addr}/queues/q"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = counted.calls();
    let watched = Duration::from_secs(30);
    tokio::time::sleep(watched).await;
    let per_second = (counted.calls() - before) as f64 / watched.as_secs_f64();
    assert!(
        per_second > 0.2,
        "the page refreshed: {per_second:.2} calls a second"
    );
    assert!(
        per_second <= 1.0,
        "{per_second:.2} broker calls a second with one page open"
    );
    assert_eq!(
        b.listed().await.len(),
        20,
        "the page still shows the queue's jobs"
    );
    let Browser { client, .. } = &b;
    client.clone().close().await.unwrap();
}
