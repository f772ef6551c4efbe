//! `hopper work -- COMMAND` on SQLite: exit statuses settle jobs (0 done, 65 dead at once,
//! others retried with standard error kept), `--timeout` kills the command's process group
//! and charges the attempt, and SIGTERM hands back the jobs not started.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hopper::{JobId, JobState};

use crate::support::{hopper, sqlite_url};

fn start_work(url: &str, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["--broker", url, "work"])
        .args(args)
        .env_remove("HOPPER_BROKER")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn stop(child: Child) -> String {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn enqueue(url: &str, payload: &str, extra: &[&str]) -> i64 {
    let mut args = vec!["--broker", url, "enqueue", "q", payload];
    args.extend_from_slice(extra);
    let out = hopper(&args);
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Waits until `done` holds of the job records, for at most 30 s.
fn wait_until(url: &str, ids: &[i64], done: impl Fn(&[hopper::JobRecord]) -> bool) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(hopper::connect(url)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let records: Vec<_> = ids
            .iter()
            .map(|&id| rt.block_on(broker.job(JobId(id))).unwrap().unwrap())
            .collect();
        if done(&records) {
            return;
        }
        assert!(Instant::now() < deadline, "not reached: {records:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn exit_statuses_settle_the_jobs() {
    let (url, dir) = sqlite_url("work");
    let out = dir.join("ran");
    let ok = enqueue(&url, r#"{"n":1}"#, &[]);
    let dead = enqueue(&url, r#"{"n":65}"#, &[]);
    let flaky = enqueue(&url, r#"{"n":3}"#, &["--max-attempts", "2"]);
    let script = format!(
        r#"read p; echo "$HOPPER_QUEUE $HOPPER_JOB_ID $HOPPER_ATTEMPT $p" >> {}
           case "$p" in *65*) exit 65;; *3*) echo "no luck" >&2; exit 3;; esac"#,
        out.display()
    );
    let worker = start_work(
        &url,
        &["q", "--concurrency", "2", "--", "sh", "-c", &script],
    );
    wait_until(&url, &[dead, flaky], |r| {
        r.iter().all(|r| r.state == JobState::Dead)
    });
    stop(worker);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(hopper::connect(&url)).unwrap();
    let record = |id| rt.block_on(broker.job(JobId(id))).unwrap();
    assert!(record(ok).is_none(), "an acknowledged job is deleted");
    let dead = record(dead).unwrap();
    assert_eq!(dead.job.attempt, 1, "dead-lettered at once");
    assert_eq!(
        dead.last_error.as_deref(),
        Some("sh exited 65 (dead-letter)")
    );
    let flaky = record(flaky).unwrap();
    assert_eq!(flaky.job.attempt, 2);
    assert_eq!(flaky.last_error.as_deref(), Some("sh exited 3: no luck"));
    let ran = std::fs::read_to_string(&out).unwrap();
    let mut lines: Vec<&str> = ran.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 4, "{ran}");
    assert!(
        lines.contains(&format!("q {} 2 {{\"n\":3}}", flaky.job.id).as_str()),
        "{ran}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_timeout_kills_the_group_and_sigterm_hands_back_what_did_not_start() {
    let (url, dir) = sqlite_url("work_stop");
    let slow = enqueue(&url, r#"{"n":1}"#, &["--max-attempts", "1"]);
    // The command's own child sleeps: only a kill of the whole group stops it.
    let marker = format!(
        "{}.{}",
        40 + std::process::id() % 50,
        std::process::id() % 997
    );
    let script = format!("sleep {marker} & wait");
    let worker = start_work(&url, &["q", "--timeout", "1s", "--", "sh", "-c", &script]);
    wait_until(&url, &[slow], |r| r[0].state == JobState::Dead);
    let err = stop(worker);
    assert!(err.contains("0 done, 0 retried, 1 dead"), "{err}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = rt.block_on(hopper::connect(&url)).unwrap();
    let record = rt.block_on(broker.job(JobId(slow))).unwrap().unwrap();
    assert_eq!(record.last_error.as_deref(), Some("timed out after 1s"));
    std::thread::sleep(Duration::from_millis(300));
    let left = Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "the command's child survived the timeout"
    );

    // One slot, four 2 s jobs: SIGTERM while the first runs. It finishes within the grace;
    // the three not started are pending again, attempts unchanged.
    let ids: Vec<i64> = (0..4).map(|i| enqueue(&url, &i.to_string(), &[])).collect();
    let worker = start_work(
        &url,
        &[
            "q",
            "--concurrency",
            "1",
            "--prefetch",
            "4",
            "--",
            "sh",
            "-c",
            "sleep 2",
        ],
    );
    wait_until(&url, &ids[..1], |r| r[0].state == JobState::Leased);
    std::thread::sleep(Duration::from_millis(300));
    let err = stop(worker);
    assert!(err.contains("1 done"), "{err}");
    assert!(err.contains("3 handed back"), "{err}");
    for &id in &ids[1..] {
        let r = rt.block_on(broker.job(JobId(id))).unwrap().unwrap();
        assert_eq!((r.state, r.job.attempt), (JobState::Pending, 0), "job {id}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Logs go to standard error as `--log-format` says: one JSON object a line, or text
/// without colour codes when standard error is not a terminal (a pipe here).
#[test]
fn logs_follow_the_log_format_and_keep_colour_off_pipes() {
    let (url, dir) = sqlite_url("work_logs");
    for format in ["json", "text"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
            .args([
                "--broker",
                &url,
                "--log-format",
                format,
                "work",
                "q",
                "--",
                "true",
            ])
            .env_remove("HOPPER_BROKER")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The start line comes once the worker runs (and listens for SIGTERM).
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
        let mut seen = String::new();
        let line = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("no start line in {format}: {seen}"))
                .unwrap();
            seen.push_str(&line);
            if line.contains("working") {
                break line;
            }
        };
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(child.wait().unwrap().success());
        let all = format!("{seen}{}", rest.join("\n"));
        assert!(!all.contains('\u{1b}'), "colour codes in a pipe: {all}");
        if format == "json" {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["fields"]["message"], "working", "{line}");
            assert_eq!(v["fields"]["command"], "true", "{line}");
            assert_eq!(v["level"], "INFO", "{line}");
        }
    }
    std::fs::remove_dir_all(dir).ok();
}
