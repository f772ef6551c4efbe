//! `hopper work --metrics ADDR`: the page parses as Prometheus text (with a parser), and
//! its counters and histograms equal what the run did.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prometheus_parse::{Scrape, Value};

use crate::support::{hopper_fed, sqlite_url};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /metrics`, parsed; `None` while nothing listens.
fn scrape(port: u16) -> Option<Scrape> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    Some(Scrape::parse(lines).expect("/metrics parses as Prometheus text"))
}

/// The value of `name` whose labels include `labels`.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let sample = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))?;
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
        Value::Histogram(buckets) => buckets.iter().map(|b| b.count).reduce(f64::max),
        Value::Summary(_) => panic!("{name} is a summary, not a histogram"),
    }
}

#[test]
fn counters_on_the_metrics_page_equal_the_run() {
    let (url, dir) = sqlite_url("metrics");
    let payloads: String = (0..8).map(|n| format!("{n}\n")).collect();
    let args = ["--broker", &url, "enqueue", "q", "--max-attempts", "1"];
    assert!(hopper_fed(&args, &payloads).status.success());

    // Multiples of 4 (0 and 4) are dead-lettered at once; the other six succeed.
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "--broker",
            &url,
            "work",
            "q",
            "--metrics",
            &addr,
            "--sample-every",
            "100ms",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "n=$(cat); [ $((n % 4)) -ne 0 ] || exit 65",
        ])
        .env_remove("HOPPER_BROKER")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let q = [("queue", "q"), ("broker", "sqlite")];
    let deadline = Instant::now() + Duration::from_secs(30);
    let page = loop {
        if let Some(page) = scrape(port) {
            let done = value(&page, "hopper_jobs_completed_total", &q).unwrap_or(0.0);
            let dead = value(&page, "hopper_jobs_dead_total", &q).unwrap_or(0.0);
            let sampled = value(
                &page,
                "hopper_queue_jobs",
                &[("queue", "q"), ("state", "dead")],
            );
            if done + dead >= 8.0 && sampled == Some(2.0) {
                break page;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the run did not show on /metrics"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());

    assert_eq!(value(&page, "hopper_jobs_completed_total", &q), Some(6.0));
    assert_eq!(value(&page, "hopper_jobs_dead_total", &q), Some(2.0));
    assert_eq!(value(&page, "hopper_jobs_fetched_total", &q), Some(8.0));
    assert_eq!(value(&page, "hopper_jobs_retried_total", &q), Some(0.0));
    assert_eq!(
        value(&page, "hopper_job_duration_seconds", &q),
        Some(8.0),
        "one per job"
    );
    assert_eq!(
        value(&page, "hopper_job_start_delay_seconds", &q),
        Some(8.0)
    );
    let fetches = value(&page, "hopper_fetch_size", &q).unwrap();
    assert!(
        (1.0..=8.0).contains(&fetches),
        "{fetches} fetches for 8 jobs"
    );
    let pending = [("queue", "q"), ("state", "pending")];
    assert_eq!(value(&page, "hopper_queue_jobs", &pending), Some(0.0));
    let _ = std::fs::remove_dir_all(dir);
}
