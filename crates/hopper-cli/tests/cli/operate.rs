//! Operating a broker through the commands alone, as an operator would: enqueue, stats,
//! `hopper work` with a command that fails for some payloads, the dead letters listed with
//! their errors, retried, and run, the worker listed while it runs and the queue's
//! throughput counted; and a queue paused from another process.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{hopper, hopper_fed, sqlite_url};

pub(crate) fn start_work(url: &str, queue: &str, script: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["--broker", url, "work", queue, "--concurrency", "4", "--"])
        .args(["sh", "-c", script])
        .env_remove("HOPPER_BROKER")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

pub(crate) fn stop(mut child: Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(
        child.wait().unwrap().success(),
        "hopper work stopped cleanly"
    );
}

/// Runs `hopper --broker URL ARGS`, which must succeed; its standard output.
pub(crate) fn ok(url: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut all = vec!["--broker", url];
    all.extend_from_slice(args);
    let out = hopper_fed(&all, stdin.unwrap_or(""));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hopper {args:?} failed: {stderr}");
    assert!(!out.stdout.contains(&0x1b), "an escape code reached a pipe");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One queue's `stats --json` as (pending, scheduled, leased, dead).
pub(crate) fn stats(url: &str, queue: &str) -> (u64, u64, u64, u64) {
    let out = ok(url, &["stats", "--queue", queue, "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("stats --json is JSON");
    let q = &v[0];
    assert_eq!(q["queue"], queue, "{v}");
    let n = |k: &str| q[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    (n("pending"), n("scheduled"), n("leased"), n("dead"))
}

/// One queue's completed, failed and dead over the last hour, from `stats --json`.
fn last_hour(url: &str, queue: &str) -> (u64, u64, u64) {
    let out = ok(url, &["stats", "--queue", queue, "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("stats --json is JSON");
    let h = &v[0]["last_hour"];
    let n = |k: &str| h[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    (n("completed"), n("failed"), n("dead"))
}

/// One queue's consumers from `stats --json`.
fn consumers(url: &str, queue: &str) -> u64 {
    let out = ok(url, &["stats", "--queue", queue, "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("stats --json is JSON");
    v[0]["consumers"]
        .as_u64()
        .unwrap_or_else(|| panic!("consumers in {v}"))
}

/// `hopper workers --json`.
fn live_workers(url: &str) -> Vec<serde_json::Value> {
    let out = ok(url, &["workers", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("workers --json is JSON");
    v.as_array().expect("an array").clone()
}

pub(crate) fn wait_for_stats(url: &str, queue: &str, want: (u64, u64, u64, u64)) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = stats(url, queue);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "stats stayed at {got:?}, wanted {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `hopper --broker URL ARGS`, which must fail with exit 1 saying the broker does
/// not support `what`.
fn not_supported(url: &str, args: &[&str], what: &str) {
    let mut all = vec!["--broker", url];
    all.extend_from_slice(args);
    let out = hopper_fed(&all, "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "hopper {args:?}: {stderr}");
    assert!(
        stderr.contains(&format!("broker does not support {what}")),
        "hopper {args:?}: {stderr}"
    );
}

/// What a broker keeps: records of each job, worker reports and throughput (every broker
/// but RabbitMQ), or messages alone (RabbitMQ: depths, re-drives and pauses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeps {
    Records,
    Messages,
}

/// The scenario of the issue, through the commands only, on the broker at `url`. On a
/// broker that keeps messages alone, the listings and the worker list are refused by name
/// and the dead letters are checked by count.
pub fn scenario(url: &str, scratch: &Path, keeps: Keeps) {
    let lines: String = (0..100).map(|n| format!("{n}\n")).collect();
    let ids = ok(
        url,
        &["enqueue", "ops", "--max-attempts", "2"],
        Some(&lines),
    );
    assert_eq!(ids.lines().count(), 100, "one id a job");
    assert_eq!(stats(url, "ops"), (100, 0, 0, 0), "100 pending");

    // Multiples of 10 fail, saying why on standard error, until `fixed` exists.
    let fixed = scratch.join("fixed");
    let script = format!(
        "n=$(cat); if [ $((n % 10)) -eq 0 ] && [ ! -e {} ]; then \
         echo \"cannot take $n\" >&2; exit 3; fi",
        fixed.display()
    );
    let worker = start_work(url, "ops", &script);
    wait_for_stats(url, "ops", (0, 0, 0, 10));
    assert_eq!(consumers(url, "ops"), 1, "the worker takes the queue");
    if keeps == Keeps::Messages {
        stop(worker);
        assert_eq!(
            consumers(url, "ops"),
            0,
            "the stopped worker's consumer is gone"
        );
        return redrive_messages(url, &fixed, &script);
    }
    let pid = worker.id();
    let listed = live_workers(url);
    let me = listed
        .iter()
        .find(|w| w["pid"] == pid)
        .unwrap_or_else(|| panic!("hopper work (pid {pid}) is listed: {listed:?}"));
    assert_eq!(me["queues"][0]["queue"], "ops", "{me}");
    assert_eq!(me["queues"][0]["concurrency"], 4, "{me}");
    stop(worker);
    assert_eq!(
        consumers(url, "ops"),
        0,
        "the stopped worker is not counted"
    );
    let listed = live_workers(url);
    assert!(
        listed.iter().all(|w| w["pid"] != pid),
        "a stopped worker is not listed: {listed:?}"
    );
    assert_eq!(
        last_hour(url, "ops"),
        (90, 10, 10),
        "completed, failed attempts, dead"
    );

    let listed = ok(
        url,
        &[
            "jobs", "list", "--queue", "ops", "--state", "dead", "--json",
        ],
        None,
    );
    let page: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let dead = page["jobs"].as_array().unwrap();
    assert_eq!(dead.len(), 10, "{page}");
    for job in dead {
        let n = job["payload"].as_u64().unwrap();
        assert_eq!(n % 10, 0, "only multiples of 10 died: {job}");
        let errors = job["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2, "both attempts' errors: {job}");
        for (i, e) in errors.iter().enumerate() {
            assert_eq!(e["attempt"], i as u64 + 1, "{job}");
            let text = e["error"].as_str().unwrap();
            assert!(
                text.contains(&format!("exited 3: cannot take {n}")),
                "{text}"
            );
        }
    }

    std::fs::write(&fixed, "").unwrap();
    let retried = ok(url, &["dead", "retry", "--queue", "ops", "--all"], None);
    assert_eq!(retried, "ops: 10 dead letters retried\n");
    assert_eq!(stats(url, "ops"), (10, 0, 0, 0), "back to pending");
    let worker = start_work(url, "ops", &script);
    wait_for_stats(url, "ops", (0, 0, 0, 0));
    stop(worker);
    assert_eq!(
        last_hour(url, "ops"),
        (100, 10, 10),
        "the retried 10 completed"
    );
    let left = ok(
        url,
        &[
            "jobs", "list", "--queue", "ops", "--state", "dead", "--json",
        ],
        None,
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&left).unwrap()["jobs"],
        serde_json::json!([])
    );
}

/// The rest of the scenario on a broker that keeps messages alone: no listing of jobs or
/// workers, and no throughput; the 10 dead letters re-driven and run.
fn redrive_messages(url: &str, fixed: &Path, script: &str) {
    not_supported(
        url,
        &["jobs", "list", "--queue", "ops", "--state", "dead"],
        "listing jobs",
    );
    not_supported(url, &["workers"], "listing workers");
    let out = ok(url, &["stats", "--queue", "ops", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["last_hour"], serde_json::Value::Null, "no rates: {v}");
    std::fs::write(fixed, "").unwrap();
    let retried = ok(url, &["dead", "retry", "--queue", "ops", "--all"], None);
    assert_eq!(retried, "ops: 10 dead letters retried\n");
    let worker = start_work(url, "ops", script);
    wait_for_stats(url, "ops", (0, 0, 0, 0));
    stop(worker);
}

/// Lines in `file`: one per job started.
fn started(file: &Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |s| s.lines().count())
}

/// A worker in one process stops taking a queue's jobs within a second of `queue pause`
/// run in another, and takes them again after `queue resume`.
pub fn pause_from_another_process(url: &str, scratch: &Path) {
    let lines: String = (0..2000).map(|n| format!("{n}\n")).collect();
    ok(url, &["enqueue", "slow"], Some(&lines));
    let log = scratch.join("started");
    let script = format!("echo $HOPPER_JOB_ID >> {}; sleep 0.02", log.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "--broker",
            url,
            "work",
            "slow",
            "--concurrency",
            "1",
            "--prefetch",
            "1",
        ])
        .args(["--", "sh", "-c", &script])
        .env_remove("HOPPER_BROKER")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while started(&log) < 20 {
        assert!(Instant::now() < deadline, "the worker never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ok(url, &["queue", "pause", "slow"], None), "slow: paused\n");
    std::thread::sleep(Duration::from_secs(1));
    let after_a_second = started(&log);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        started(&log),
        after_a_second,
        "jobs started more than 1 s after the pause"
    );
    let (pending, ..) = stats(url, "slow");
    assert!(pending > 0, "the queue kept its jobs");
    assert_eq!(
        ok(url, &["queue", "pause", "slow"], None),
        "slow: already paused\n"
    );

    assert_eq!(
        ok(url, &["queue", "resume", "slow"], None),
        "slow: resumed\n"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let resumed = started(&log);
    assert!(
        resumed > after_a_second,
        "nothing started within 1.5 s of resume"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn operate_sqlite_through_the_commands() {
    let (url, dir) = sqlite_url("operate");
    scenario(&url, &dir, Keeps::Records);
    let (url, dir2) = sqlite_url("pause");
    pause_from_another_process(&url, &dir2);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(dir2);
}

#[test]
fn bad_input_to_the_operator_commands_changes_nothing() {
    let (url, dir) = sqlite_url("operate-bad");
    ok(&url, &["enqueue", "q", "1"], None);
    let cases: [(&[&str], i32, &str); 8] = [
        (&["jobs", "show", "0"], 2, "ID"),
        (
            &["jobs", "list", "--queue", "q", "--limit", "5000"],
            2,
            "limit",
        ),
        (
            &["jobs", "list", "--queue", "q", "--after", "1.2"],
            2,
            "cursor",
        ),
        (
            &["jobs", "list", "--queue", "q", "--state", "gone"],
            2,
            "state",
        ),
        (
            &["dead", "retry", "1"],
            1,
            "job 1 is pending, not dead; nothing changed",
        ),
        (&["dead", "discard", "424242"], 1, "no job 424242"),
        (&["queue", "pause", "bad queue"], 2, "queue"),
        (&["dead", "retry", "--all"], 2, "--queue"),
    ];
    for (args, code, says) in cases {
        let mut full = vec!["--broker", url.as_str()];
        full.extend_from_slice(args);
        let out = hopper(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert_eq!(stats(&url, "q"), (1, 0, 0, 0), "nothing changed");
    let later = ok(&url, &["enqueue", "q", "2", "--delay", "1h"], None);
    let later = later.trim();
    assert_eq!(
        ok(&url, &["jobs", "cancel", later], None),
        format!("job {later}: cancelled\n")
    );
    let again = hopper(&["--broker", &url, "jobs", "cancel", later]);
    assert_eq!(again.status.code(), Some(1), "cancelling twice");
    assert_eq!(stats(&url, "q"), (1, 0, 0, 0), "the delayed job is gone");
    let _ = std::fs::remove_dir_all(dir);
}
