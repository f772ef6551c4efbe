//! `hopper bench --json`, one workload at a time, at small scales.

use crate::support::{hopper, refused};

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
/// round: about one claim per batch in every drain, the note naming the rounds when there is
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
            // One claim per batch, and at most two more: a claim sized to what the window
            // had free when the drain's last jobs were still running depends on the
            // machine's timing, not on the batch size.
            let fetches = r["fetches_per_1k"].as_f64().unwrap();
            assert!(
                (1000.0 / batch..=1000.0 / batch + 2.0).contains(&fetches),
                "{r}"
            );
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
    assert_eq!(rows.len(), 2, "{rows:?}");
    // First the enqueue row, Hopper's confirmed enqueue beside lapin without confirms.
    let e = &rows[0];
    assert_eq!(e["workload"], "amqp enqueue, confirmed", "{e}");
    assert_eq!(e["jobs"], 1000, "{e}");
    assert!(e["raw_per_s"].as_f64().unwrap() > 0.0, "{e}");
    assert!(e["hopper_per_s"].as_f64().unwrap() > 0.0, "{e}");
    let r = &rows[1];
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

/// `hopper bench --only postgres --rtt 0,2` runs the PostgreSQL rows as they are, then
/// again through a delay proxy of 1 ms each way, `hopper load`'s defaults and concurrency
/// 100 at both: rows named by their round trip, each set against its own row at 0 ms,
/// every job drained (a job lost fails the run), and the round trip measured through the
/// proxy no shorter than the delays. A round trip below 0 or above 1,000 ms is refused by
/// the flag's name.
#[test]
fn bench_runs_postgres_again_through_a_delay_proxy() {
    let base = std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let rows = bench_json(&[
        "--only",
        "postgres",
        "--postgres",
        &base,
        "--rtt",
        "0,2",
        "--rounds",
        "1",
        "--scale",
        "0.001",
    ]);
    let direct = [
        "postgres drain, batch 100",
        "postgres drain, batch 50",
        "postgres drain, batch 10",
        "postgres drain, defaults (c=10)",
        "postgres drain, c=100, max_batch 100",
    ];
    let far: Vec<String> = direct.iter().map(|w| format!("{w} @ 2 ms RTT")).collect();
    assert_eq!(
        workloads(&rows),
        [
            &direct[..],
            &far.iter().map(String::as_str).collect::<Vec<_>>()
        ]
        .concat()
    );
    for r in &rows[..5] {
        assert_eq!(r["rtt_ms"], 0.0, "{r}");
        assert!(r.get("vs_0ms").is_none(), "{r}");
        assert!(!r["note"].as_str().unwrap().contains("proxy"), "{r}");
    }
    // The defaults row beside the raw loop at batch 10; the wide one beside the ceiling.
    let ends = [
        "; raw loop at batch 10",
        "; raw: 4 clients deleting 100 pending jobs a transaction",
    ];
    for (r, end) in rows[3..5].iter().zip(ends) {
        let note = r["note"].as_str().unwrap();
        assert!(note.ends_with(end), "{r}");
    }
    for (r, direct) in rows[5..].iter().zip(&rows[..5]) {
        assert_eq!(r["rtt_ms"], 2.0, "{r}");
        assert_eq!(r["jobs"], 1000, "{r}");
        assert!(r["raw_per_s"].as_f64().unwrap() > 0.0, "{r}");
        let vs = r["vs_0ms"].as_f64().expect("a rate against 0 ms");
        let rates = r["hopper_per_s"].as_f64().unwrap() / direct["hopper_per_s"].as_f64().unwrap();
        assert!((vs - rates).abs() < 1e-9, "{r}");
        let note = r["note"].as_str().unwrap();
        let at = note
            .find("through a delay proxy, 1 ms each way, SELECT 1 measured ")
            .unwrap_or_else(|| panic!("the proxy in {note}"));
        let measured: f64 = note[at..]
            .rsplit(' ')
            .nth(1)
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("a round trip in {note}"));
        assert!(measured >= 2.0, "{note}");
    }

    for rtt in ["--rtt=-1", "--rtt=0,1001"] {
        let err = refused(&["bench", "--only", "postgres", rtt]);
        assert!(err.contains("--rtt"), "{err}");
    }
}

/// `hopper bench --only amqp --rtt 2` runs the RabbitMQ row through a delay proxy alone:
/// named by its round trip, every message drained (a lost one fails the run), no rate
/// against 0 ms where 0 ms was not run, and `basic.qos` measured through the proxy.
#[test]
fn bench_runs_rabbitmq_through_a_delay_proxy() {
    let url = std::env::var("HOPPER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let rows = bench_json(&[
        "--only",
        "amqp",
        "--amqp",
        &url,
        "--amqp-windows",
        "10",
        "--rtt",
        "2",
        "--rounds",
        "1",
        "--scale",
        "0.001",
    ]);
    assert_eq!(
        workloads(&rows),
        [
            "amqp enqueue, confirmed @ 2 ms RTT",
            "amqp consume, window 10 @ 2 ms RTT"
        ]
    );
    let r = &rows[1];
    assert_eq!(
        (r["rtt_ms"].as_f64(), r["jobs"].as_u64()),
        (Some(2.0), Some(1000)),
        "{r}"
    );
    assert!(r["hopper_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r.get("vs_0ms").is_none(), "{r}");
    let note = r["note"].as_str().unwrap();
    assert!(
        note.contains("through a delay proxy, 1 ms each way, basic.qos measured "),
        "{note}"
    );
}

/// `hopper bench --only instrument` sets each instrumented drain against the same drain
/// without instrumentation: four rows (memory and PostgreSQL, a recorder, then spans too),
/// each a real drain of the asked size, its ratio the one round's instrumented rate over
/// its plain one.
#[test]
fn bench_sets_instrumented_drains_against_plain_ones() {
    let rows = bench_json(&["--only", "instrument", "--scale", "0.001", "--rounds", "1"]);
    assert_eq!(
        workloads(&rows),
        [
            "memory drain, c=8, metrics on",
            "memory drain, c=8, metrics and spans on",
            "postgres drain, batch 100, metrics on",
            "postgres drain, batch 100, metrics and spans on",
        ]
    );
    for r in &rows {
        assert_eq!(r["jobs"], 1000, "{r}");
        let (plain, ours) = (
            r["raw_per_s"].as_f64().unwrap(),
            r["hopper_per_s"].as_f64().unwrap(),
        );
        assert!(plain > 0.0 && ours > 0.0, "{r}");
        let ratio = r["ratio"].as_f64().unwrap();
        assert!(
            (ratio - ours / plain).abs() < 0.01,
            "one round's ratio: {r}"
        );
        let note = r["note"].as_str().unwrap();
        assert!(
            note.starts_with("raw: the same drain uninstrumented"),
            "{r}"
        );
    }
}
