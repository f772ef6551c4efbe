//! The `hopper` command end to end: the demo, load runs on memory and SQLite, bad input.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

fn hopper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env_remove("HOPPER_BROKER")
        .output()
        .expect("the hopper binary runs")
}

/// Runs `hopper` with `args`, which must fail; what it printed on stderr.
fn refused(args: &[&str]) -> String {
    let out = hopper(args);
    assert!(!out.status.success(), "hopper {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh SQLite URL in the temp directory, unique per test.
fn sqlite_url(name: &str) -> (String, PathBuf) {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "hopper-cli-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    (format!("sqlite://{}", dir.join("jobs.db").display()), dir)
}

fn load_json(args: &[&str]) -> serde_json::Value {
    let out = hopper(args);
    assert!(
        out.status.success(),
        "hopper {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

/// A load run's report says all `jobs` ran, none was lost and none ran twice.
fn assert_each_ran_once(report: &serde_json::Value, jobs: u64) {
    assert_eq!(report["completed"], jobs, "completed: {report}");
    assert_eq!(report["lost"], 0, "lost: {report}");
    assert_eq!(report["duplicates"], 0, "duplicates: {report}");
}

fn sizes(report: &serde_json::Value) -> Vec<u64> {
    report["batch_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// The drain ends when every job's work is done, not when the last one started: 20 jobs
/// of 300 ms at concurrency 10 are two rounds, so the drain cannot be shorter than 600 ms
/// (a lower bound the sleeps guarantee, not a speed claim), and none is handed back
/// unfinished at the end.
#[test]
fn load_waits_for_every_job_to_finish() {
    let r = load_json(&[
        "load",
        "--broker",
        "memory://",
        "--jobs",
        "20",
        "--job-ms",
        "300",
        "--concurrency",
        "10",
        "--json",
    ]);
    assert_eq!(r["completed"], 20);
    assert_eq!(r["lost"], 0);
    let drain = r["drain_s"].as_f64().unwrap();
    assert!(drain >= 0.6, "drained in {drain} s");
}

#[test]
fn load_on_memory_runs_every_job_once() {
    let r = load_json(&[
        "load",
        "--broker",
        "memory://",
        "--jobs",
        "20000",
        "--concurrency",
        "8",
        "--json",
    ]);
    assert_each_ran_once(&r, 20000);
    let s = sizes(&r);
    assert_eq!(s.iter().sum::<u64>(), 20000);
    assert!(s.iter().all(|&n| n <= 50), "max_batch 50 caps every fetch");
    for key in ["enqueue_s", "drain_s", "jobs_per_s", "jobs_per_fetch"] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key}");
    }
    assert!(
        r["inline_handoffs"].is_u64(),
        "the report counts inline hand-offs"
    );
    assert!(r["latency_ms"]["p99"].as_f64().unwrap() >= r["latency_ms"]["p50"].as_f64().unwrap());
}

#[test]
fn load_on_sqlite_with_two_workers_loses_nothing_and_claims_by_slots() {
    let (url, dir) = sqlite_url("two-workers");
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "5000",
        "--workers",
        "2",
        "--concurrency",
        "10",
        "--queues",
        "a,b",
        "--json",
    ]);
    std::fs::remove_dir_all(dir).ok();
    assert_each_ran_once(&r, 5000);
    assert_eq!(r["workers"], 2);
    // Two queues at concurrency 10 each: a fetch holds at most 20 jobs.
    assert!(sizes(&r).iter().all(|&n| n <= 20), "{:?}", sizes(&r));
}

#[test]
fn load_with_a_batch_handler_and_auto_prefetch() {
    let (url, dir) = sqlite_url("batch");
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "2000",
        "--concurrency",
        "2",
        "--batch",
        "25",
        "--prefetch",
        "100",
        "--max-batch",
        "100",
        "--json",
    ]);
    assert_eq!(r["completed"], 2000);
    assert!(sizes(&r).iter().all(|&n| n <= 100));
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "300",
        "--concurrency",
        "1",
        "--prefetch",
        "auto",
        "--json",
    ]);
    std::fs::remove_dir_all(dir).ok();
    assert_eq!(r["completed"], 300);
    let s = sizes(&r);
    assert_eq!(
        &s[..4],
        &[1, 1, 2, 2],
        "auto starts small and doubles: {s:?}"
    );
    assert!(s.iter().all(|&n| n <= 16));
}

#[test]
fn the_demo_passes_on_the_embedded_default() {
    let (url, dir) = sqlite_url("demo");
    let out = hopper(&["demo", "--broker", &url]);
    std::fs::remove_dir_all(dir).ok();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("batch sizes    1 ×40"), "{text}");
    assert!(text.contains("batch sizes    1 1 2 2 4 4 8 8 "), "{text}");
    assert!(text.contains("batch sizes    1 ×10"), "{text}");
    assert!(text.trim_end().ends_with("PASS: 5 checks"), "{text}");
    assert!(!text.contains("FAIL"));
}

#[test]
fn bad_input_is_refused_by_name_and_hides_passwords() {
    let err = refused(&["load", "--broker", "redis://app:s3cret@db/0", "--jobs", "1"]);
    assert!(
        err.contains("invalid broker URL `redis://app:***@db/0`"),
        "{err}"
    );
    assert!(!err.contains("s3cret"));
    for url in [
        "postgres://app:s3cret@127.0.0.1:1/jobs",
        "mysql://app:s3cret@127.0.0.1:1/jobs",
    ] {
        let err = refused(&["load", "--broker", url, "--jobs", "1"]);
        assert!(err.contains("app:***@127.0.0.1:1/jobs"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }

    let err = refused(&[
        "load",
        "--broker",
        "memory://",
        "--jobs",
        "1",
        "--prefetch",
        "eager",
    ]);
    assert!(err.contains("invalid prefetch `eager`"), "{err}");

    let err = refused(&[
        "load",
        "--broker",
        "memory://",
        "--jobs",
        "10",
        "--max-batch",
        "5000",
    ]);
    assert!(
        err.contains("invalid max_batch of queue load `5000`: allowed: 1..=1000"),
        "{err}"
    );
}

/// A broker that fails says why, not only what it was doing: the driver's cause follows.
#[test]
fn a_broker_failure_is_printed_with_its_cause() {
    let dir = std::env::temp_dir().join(format!("hopper-cli-missing-{}", std::process::id()));
    let url = format!("sqlite://{}/jobs.db", dir.display());
    let err = refused(&["migrate", "--broker", &url]);
    assert!(
        err.contains(&format!(
            "error: broker error: opening SQLite database `{}/jobs.db`: unable to open database file",
            dir.display()
        )),
        "{err}"
    );
    let err = refused(&[
        "migrate",
        "--broker",
        "postgres://postgres@127.0.0.1:5432/hopper_no_such_database",
    ]);
    assert!(
        err.contains("database \"hopper_no_such_database\" does not exist"),
        "{err}"
    );
    assert_eq!(err.matches("does not exist").count(), 1, "{err}");
}

/// The PostgreSQL server the tests use, with a schema of the test's own.
fn postgres_url(schema: &str) -> String {
    let base = std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    format!("{base}?schema={schema}")
}

fn drop_postgres_schema(schema: &str) {
    let status = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc"])
        .arg(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "dropping schema {schema}"
    );
}

#[test]
fn migrate_then_load_on_postgres() {
    let schema = format!("hopper_cli_{}", std::process::id());
    let url = postgres_url(&schema);
    let err = refused(&["load", "--broker", &url, "--jobs", "10"]);
    assert!(
        err.contains("is at version 0 but this build needs 2: run `hopper migrate --broker"),
        "{err}"
    );

    let out = hopper(&["migrate", "--broker", &url]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("applied 2 migrations"));
    let out = hopper(&["migrate", "--broker", &url]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("schema up to date"));

    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "3000",
        "--workers",
        "2",
        "--concurrency",
        "10",
        "--json",
    ]);
    drop_postgres_schema(&schema);
    assert_each_ran_once(&r, 3000);
    assert!(
        sizes(&r).iter().all(|&n| n <= 10),
        "slots: at most the 10 free slots"
    );
}

#[test]
fn migrate_then_load_on_mariadb() {
    let db = format!("hopper_cli_{}", std::process::id());
    let mariadb = |sql: &str| {
        let status = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-u", "root", "-e", sql])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "{sql}");
    };
    mariadb(&format!("CREATE DATABASE IF NOT EXISTS {db}"));
    let base = std::env::var("HOPPER_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_owned());
    let url = format!("{}/{db}", base.trim_end_matches("/test"));
    let out = hopper(&["migrate", "--broker", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("applied 1 migration"));
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "2000",
        "--workers",
        "2",
        "--concurrency",
        "10",
        "--json",
    ]);
    mariadb(&format!("DROP DATABASE {db}"));
    assert_each_ran_once(&r, 2000);
    assert!(sizes(&r).iter().all(|&n| n <= 10));
}

#[test]
fn load_on_rabbitmq_counts_batches_handed_to_handlers() {
    let base = std::env::var("HOPPER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let queue = format!("hopper_cli_{}", std::process::id());
    let delete = || {
        for q in [queue.clone(), format!("{queue}.dead")] {
            let _ = Command::new("rabbitmqctl")
                .args(["delete_queue", "-q", &q])
                .output();
        }
    };
    let one = hopper(&[
        "load",
        "--broker",
        &base,
        "--queues",
        &queue,
        "--jobs",
        "2000",
        "--concurrency",
        "10",
        "--json",
    ]);
    let batched = hopper(&[
        "load",
        "--broker",
        &base,
        "--queues",
        &queue,
        "--jobs",
        "2000",
        "--concurrency",
        "4",
        "--prefetch",
        "40",
        "--batch",
        "10",
        "--json",
    ]);
    delete();
    for out in [&one, &batched] {
        assert!(
            out.status.success(),
            "hopper load on RabbitMQ failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(
        (one["completed"].as_u64(), one["lost"].as_u64()),
        (Some(2000), Some(0))
    );
    assert_eq!(one["duplicates"], 0);
    assert_eq!(
        one["fetches"], 2000,
        "a job handed to a one-job handler is a fetch"
    );
    assert!(
        sizes(&one).iter().all(|&n| n == 1),
        "without --batch, all 1"
    );

    let batched: serde_json::Value = serde_json::from_slice(&batched.stdout).unwrap();
    assert_eq!(batched["completed"], 2000);
    assert_eq!(batched["lost"], 0);
    let s = sizes(&batched);
    assert_eq!(
        s.iter().sum::<u64>(),
        2000,
        "batch sizes add up to the jobs"
    );
    assert!(s.iter().all(|&n| n <= 10), "batches of at most 10: {s:?}");
    assert_eq!(
        batched["fetches"].as_u64(),
        Some(s.len() as u64),
        "one fetch per batch"
    );
}

/// `--prefilled` drains a backlog already in the queue, as `hopper bench` leaves one for a
/// raw baseline: nothing is purged or enqueued, every job runs once, and a queue the run
/// does not name keeps its jobs.
#[test]
fn load_prefilled_drains_the_backlog_in_place() {
    let (url, dir) = sqlite_url("prefilled");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(async {
        let broker = hopper::connect(&url).await.unwrap();
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let backlog = (0..300usize)
            .map(|i| hopper::NewJob::json("pre", &(i, now_us)).unwrap())
            .collect();
        broker.enqueue(backlog).await.unwrap();
        let other = (0..5usize)
            .map(|i| hopper::NewJob::json("other", &(i, now_us)).unwrap())
            .collect();
        broker.enqueue(other).await.unwrap();
        broker
    });
    let r = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "300",
        "--queues",
        "pre",
        "--prefilled",
        "--json",
    ]);
    assert_each_ran_once(&r, 300);
    assert_eq!(r["enqueue_s"].as_f64(), Some(0.0));
    let (pre, other) = rt.block_on(async {
        (
            broker.counts("pre").await.unwrap(),
            broker.counts("other").await.unwrap(),
        )
    });
    assert_eq!((pre.pending, pre.leased), (0, 0));
    assert_eq!(other.pending, 5);
    drop(broker);
    std::fs::remove_dir_all(dir).ok();
}

/// `hopper bench --json` with `args`: its rows, once it succeeded.
fn bench_json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = hopper(&[&["bench", "--json"], args].concat());
    assert!(
        out.status.success(),
        "hopper bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON array");
    rows
}

/// The workload of each row, in order.
fn workloads(rows: &[serde_json::Value]) -> Vec<&str> {
    rows.iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect()
}

/// `hopper bench --only memory` reports each memory row as the median of its interleaved
/// rounds: two rows, each a real drain of the asked size against a real mpsc baseline, the
/// ratio taken between the two medians.
#[test]
fn bench_memory_rows_are_medians_of_rounds() {
    let rows = bench_json(&["--only", "memory", "--scale", "0.001"]);
    assert_eq!(
        workloads(&rows),
        ["memory drain, c=8", "memory drain, c=8, max_batch 256"]
    );
    for r in &rows {
        assert_eq!(r["jobs"], 1000, "{r}");
        let (raw, ours) = (
            r["raw_per_s"].as_f64().unwrap(),
            r["hopper_per_s"].as_f64().unwrap(),
        );
        assert!(raw > 0.0 && ours > 0.0, "{r}");
        let ratio = r["ratio"].as_f64().unwrap();
        assert!(
            (ratio - ours / raw).abs() < 0.01,
            "ratio of the medians: {r}"
        );
        let fetches = r["fetches_per_1k"].as_f64().unwrap();
        assert!(
            (1000.0 / 256.0..=1000.0).contains(&fetches),
            "fetches per 1,000 jobs within 1,000 / max_batch and 1,000: {r}"
        );
        assert!(
            r["note"]
                .as_str()
                .unwrap()
                .starts_with("median of 9 interleaved rounds"),
            "{r}"
        );
    }
}

/// `hopper bench --only sqlite` pairs each of its rows' raw loops with a drain round by
/// round: one claim per batch in every drain, the note naming the rounds when there is
/// more than one.
#[test]
fn bench_sqlite_rows_pair_raw_and_hopper_rounds() {
    for (rounds, note) in [
        (
            "2",
            "medians of 2 interleaved rounds, ratio the median of each round's; \
             raw: broker fetch+settle loop",
        ),
        ("1", "raw: broker fetch+settle loop"),
    ] {
        let rows = bench_json(&["--only", "sqlite", "--scale", "0.001", "--rounds", rounds]);
        assert_eq!(
            workloads(&rows),
            ["sqlite drain, batch 100", "sqlite drain, batch 10"]
        );
        for (r, batch) in rows.iter().zip([100.0, 10.0]) {
            assert_eq!(r["jobs"], 1000, "{r}");
            assert!(r["raw_per_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["ratio"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["fetches_per_1k"].as_f64(), Some(1000.0 / batch), "{r}");
            assert_eq!(r["note"].as_str(), Some(note), "{r}");
        }
    }
}

/// `hopper bench --only idle` watches an idle worker on PostgreSQL and on MySQL, each in a
/// scratch database of its own, for 2 s at this scale. PostgreSQL counts the transactions
/// of that database alone: the worker's backstop poll, once a second (a reading may lag a
/// poll by a second either side), where a worker polling busily would make dozens. MariaDB
/// counts the statements of the row's own user: the poll's one statement and the wake
/// poller's one, each once a second at most, where a poll in a transaction of its own made
/// five.
#[test]
fn bench_counts_what_an_idle_worker_asks_of_the_server() {
    let rows = bench_json(&["--only", "idle", "--scale", "0.001"]);
    assert_eq!(
        workloads(&rows),
        ["postgres idle worker, 2 s", "mysql idle worker, 2 s"]
    );
    let pg = rows[0]["idle_per_s"].as_f64().expect("a figure");
    assert!((0.0..=2.5).contains(&pg), "{}", rows[0]);
    assert!(
        rows[0]["note"]
            .as_str()
            .unwrap()
            .contains("transactions in"),
        "{}",
        rows[0]
    );
    let mysql = rows[1]["idle_per_s"].as_f64().expect("a figure");
    assert!((0.5..=3.5).contains(&mysql), "{}", rows[1]);
    let note = rows[1]["note"].as_str().unwrap();
    assert!(
        note.contains("statements in") && !note.contains("Questions"),
        "counted by the row's own user: {}",
        rows[1]
    );
}

/// `hopper bench --only amqp --amqp-windows 10` runs that one RabbitMQ row: the raw lapin
/// consumer and Hopper each drain the whole backlog, the window's acks grouped (a settlement
/// per half window at most). A window of 0 is refused by the flag's name.
#[test]
fn bench_runs_the_asked_rabbitmq_windows_only() {
    let url = std::env::var("HOPPER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let rows = bench_json(&[
        "--only",
        "amqp",
        "--amqp",
        &url,
        "--amqp-windows",
        "10",
        "--rounds",
        "1",
        "--scale",
        "0.001",
    ]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r["workload"], "amqp consume, window 10", "{r}");
    assert_eq!(r["jobs"], 1000, "{r}");
    assert!(r["raw_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["hopper_per_s"].as_f64().unwrap() > 0.0, "{r}");
    // A pushed broker counts each job handed to a one-job handler as a fetch. Acks go out
    // grouped: once half the window (five) awaits them, or when the 2 ms settle delay runs
    // out first, as it may when the process is descheduled on a busy machine; never one
    // per delivery.
    assert_eq!(r["fetches_per_1k"].as_f64().unwrap(), 1000.0, "{r}");
    let settles = r["settles_per_1k"].as_f64().unwrap();
    assert!((1.0..500.0).contains(&settles), "{r}");
    // One round has no spread of ratios to give.
    let note = r["note"].as_str().unwrap();
    assert!(
        note.starts_with("medians of 1 interleaved rounds") && !note.contains("rounds' ratios"),
        "{r}"
    );

    let err = refused(&["bench", "--only", "amqp", "--amqp-windows", "0"]);
    assert!(err.contains("--amqp-windows"), "{err}");
}

/// `hopper bench --only latency` measures each broker's idle latency, and PostgreSQL's
/// beside the floor a plain listener reaches with the broker's own claim. The floor's
/// figures are real waits: a notification takes the server a wake-up of the listening
/// session and a message on the socket, not microseconds (one left over from an earlier
/// enqueue would be read at once), and the claim after it a round trip more.
#[test]
fn bench_latency_sets_postgres_beside_a_raw_listener() {
    let base = std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let rows = bench_json(&["--only", "latency", "--postgres", &base]);
    assert_eq!(
        workloads(&rows),
        [
            "memory idle latency, commit to start",
            "sqlite idle latency, commit to start",
            "postgres idle latency, commit to start"
        ]
    );
    for r in &rows {
        assert_eq!(r["jobs"], 200, "{r}");
        let (p50, p99) = (r["p50_ms"].as_f64().unwrap(), r["p99_ms"].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99, "{r}");
    }
    let note = rows[2]["note"].as_str().unwrap();
    let raw = &note[note
        .find("raw (LISTEN")
        .unwrap_or_else(|| panic!("the floor in {note}"))..];
    let figure = |label: &str| -> f64 {
        let at = raw
            .find(label)
            .unwrap_or_else(|| panic!("{label} in {note}"))
            + label.len();
        raw[at..]
            .split([',', ' '])
            .find(|s| !s.is_empty())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a number after {label} in {note}"))
    };
    let (p50, p99, notified) = (
        figure("claimed: p50 "),
        figure("p99 "),
        figure("notification p50 "),
    );
    assert!(p50 <= p99, "{note}");
    assert!(
        notified >= 0.005,
        "a notification within 5 µs of the commit: {note}"
    );
    assert!(p50 - notified >= 0.01, "a claim within 10 µs: {note}");
}
