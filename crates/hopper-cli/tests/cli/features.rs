//! Rate limits and groups through the commands alone, on SQLite: a limit set by an
//! operator and one set by `hopper work --rate-limit` hold across processes, and one per
//! key lets each tenant's job through and moves the rest, as a load over rate keys does; a
//! group enqueued with `--group`, sealed and worked completes once, with its dead named.

use std::time::Duration;

use crate::operate::{ok, start_work, stats, stop, wait_for_stats};
use crate::support::{assert_each_ran_once, hopper, load_json, sqlite_url};

/// The `--json` stats of `queue`.
fn stats_json(url: &str, queue: &str) -> serde_json::Value {
    let out = ok(url, &["stats", "--queue", queue, "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("stats --json is JSON");
    v[0].clone()
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[test]
fn rate_limits_through_the_commands() {
    let (url, dir) = sqlite_url("limits");
    let url = url.as_str();
    assert_eq!(
        ok(url, &["queue", "limit", "calls", "3/1h"], None),
        "calls: at most 3/1h jobs start\n"
    );
    let limit = &stats_json(url, "calls")["rate_limit"];
    assert_eq!(
        *limit,
        serde_json::json!({"max": 3, "per_ms": 3_600_000, "per_key": false})
    );
    let payloads: String = (0..10).map(|i| format!("{i}\n")).collect();
    ok(url, &["enqueue", "calls"], Some(&payloads));

    // Two workers in two processes: 3 start between them, the limit's whole hour.
    let log = dir.join("calls.log");
    let script = format!("cat >> {}; echo >> {}", log.display(), log.display());
    let (a, b) = (
        start_work(url, "calls", &script),
        start_work(url, "calls", &script),
    );
    wait_for_stats(url, "calls", (7, 0, 0, 0));
    std::thread::sleep(Duration::from_secs(2));
    stop(a);
    stop(b);
    assert_eq!(lines(&log), 3, "jobs run under a limit of 3 an hour");
    assert_eq!(stats(url, "calls"), (7, 0, 0, 0));

    // A worker sets its queue's limit itself.
    ok(url, &["enqueue", "mail"], Some(&payloads));
    let mail = dir.join("mail.log");
    let script = format!("cat >> {}; echo >> {}", mail.display(), mail.display());
    let worker = std::process::Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "--broker",
            url,
            "work",
            "mail",
            "--rate-limit",
            "2/1h",
            "--",
        ])
        .args(["sh", "-c", &script])
        .env_remove("HOPPER_BROKER")
        .spawn()
        .unwrap();
    wait_for_stats(url, "mail", (8, 0, 0, 0));
    stop(worker);
    assert_eq!(lines(&mail), 2);
    let limit = &stats_json(url, "mail")["rate_limit"];
    assert_eq!(
        *limit,
        serde_json::json!({"max": 2, "per_ms": 3_600_000, "per_key": false})
    );

    assert_eq!(
        ok(url, &["queue", "limit", "calls", "--off"], None),
        "calls: no rate limit\n"
    );
    assert_eq!(
        stats_json(url, "calls")["rate_limit"],
        serde_json::Value::Null
    );
    let bad = hopper(&["--broker", url, "queue", "limit", "calls", "0/1s"]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && stderr.contains("rate limit"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rate_limits_per_key_through_the_commands() {
    let (url, dir) = sqlite_url("key_limits");
    let url = url.as_str();
    assert_eq!(
        ok(
            url,
            &["queue", "limit", "exports", "1/1h", "--per-key"],
            None
        ),
        "exports: at most 1/1h jobs of each rate key start\n"
    );
    let limit = &stats_json(url, "exports")["rate_limit"];
    let expected = serde_json::json!({"max": 1, "per_ms": 3_600_000, "per_key": true});
    assert_eq!(*limit, expected);
    let lacking = hopper(&[
        "--broker",
        url,
        "enqueue",
        "exports",
        r#"{"other":1}"#,
        "--rate-key-from",
        "tenant",
    ]);
    let refused = String::from_utf8_lossy(&lacking.stderr).into_owned();
    assert!(
        !lacking.status.success() && refused.contains("rate_key"),
        "{refused}"
    );
    let payloads = "{\"tenant\":\"a\"}\n{\"tenant\":\"a\"}\n{\"tenant\":\"b\"}\n";
    let ids = ok(
        url,
        &["enqueue", "exports", "--rate-key-from", "tenant"],
        Some(payloads),
    );
    assert_eq!(ids.lines().count(), 3);
    let third = ids.lines().nth(2).unwrap();
    let shown = ok(url, &["jobs", "show", third], None);
    assert!(shown.contains("rate key     b\n"), "{shown}");
    let json = ok(url, &["jobs", "show", third, "--json"], None);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["rate_key"], "b");

    // One of each tenant runs; a's second is moved to its key's next room, an hour on.
    let log = dir.join("exports.log");
    // One write per job, payload and newline together: the two run at once.
    let script = format!("printf '%s\\n' \"$(cat)\" >> {}", log.display());
    let worker = start_work(url, "exports", &script);
    wait_for_stats(url, "exports", (0, 1, 0, 0));
    stop(worker);
    let ran = std::fs::read_to_string(&log).unwrap();
    let mut ran: Vec<&str> = ran.lines().filter(|l| !l.is_empty()).collect();
    ran.sort();
    assert_eq!(ran, [r#"{"tenant":"a"}"#, r#"{"tenant":"b"}"#]);
    let _ = std::fs::remove_dir_all(dir);
}

/// `hopper load --rate-keys 3 --rate-limit "2/1h per key"`: 6 jobs over 3 keys all start
/// at once (without the keys they would share one window of 2 and the load would stall),
/// and the limit is lifted after.
#[test]
fn a_load_spreads_its_jobs_over_rate_keys_and_lifts_its_limit() {
    let (url, dir) = sqlite_url("load_rate_keys");
    let report = load_json(&[
        "load",
        "--broker",
        &url,
        "--jobs",
        "6",
        "--rate-keys",
        "3",
        "--rate-limit",
        "2/1h per key",
        "--json",
    ]);
    assert_each_ran_once(&report, 6);
    assert_eq!(
        stats_json(&url, "load")["rate_limit"],
        serde_json::Value::Null
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn groups_through_the_commands() {
    let (url, dir) = sqlite_url("groups");
    let url = url.as_str();
    let ids = ok(
        url,
        &["enqueue", "rows", "--group", "import"],
        Some("1\n2\n3\n"),
    );
    assert_eq!(ids.lines().count(), 3);
    assert_eq!(
        ok(
            url,
            &["group", "seal", "import", "report", r#"{"of":"import"}"#],
            None
        ),
        "import: sealed; the completion job follows the last of 3 members\n"
    );
    let show = || -> serde_json::Value {
        let out = ok(url, &["group", "show", "import", "--json"], None);
        serde_json::from_str(&out).expect("group show --json is JSON")
    };
    let status = show();
    assert_eq!(
        (status["members"].as_u64(), status["unsettled"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(status["sealed"], true);
    let late = hopper(&["--broker", url, "enqueue", "rows", "--group", "import", "4"]);
    let stderr = String::from_utf8_lossy(&late.stderr);
    assert!(
        !late.status.success() && stderr.contains("group"),
        "{stderr}"
    );
    assert_eq!(
        stats(url, "rows"),
        (3, 0, 0, 0),
        "the late member was not stored"
    );

    // Row 2 cannot succeed: exit 65 dead-letters it at once.
    let worker = start_work(url, "rows", r#"test "$(cat)" != 2 || exit 65"#);
    wait_for_stats(url, "report", (1, 0, 0, 0));
    stop(worker);
    let status = show();
    let dead: i64 = ids.lines().nth(1).unwrap().parse().unwrap();
    assert_eq!(
        (status["succeeded"].as_u64(), status["unsettled"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(status["dead"], serde_json::json!([dead]));
    assert!(status["completion"].is_i64(), "{status}");
    let text = ok(url, &["group", "show", "import"], None);
    assert!(text.contains(&format!("dead       1  ({dead})")), "{text}");
    let again = hopper(&["--broker", url, "group", "seal", "import", "report"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && stderr.contains("group"),
        "{stderr}"
    );
    let missing = hopper(&["--broker", url, "group", "show", "nothing"]);
    assert!(!missing.status.success());
    let _ = std::fs::remove_dir_all(dir);
}
