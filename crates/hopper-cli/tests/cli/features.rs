//! Rate limits and groups through the commands alone, on SQLite: a limit set by an
//! operator and one set by `hopper work --rate-limit` hold across processes; groups are
//! refused by name where the broker keeps none.

use std::time::Duration;

use crate::operate::{ok, start_work, stats, stop, wait_for_stats};
use crate::support::{hopper, sqlite_url};

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
    assert_eq!(*limit, serde_json::json!({"max": 3, "per_ms": 3_600_000}));
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
    assert_eq!(*limit, serde_json::json!({"max": 2, "per_ms": 3_600_000}));

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

/// SQLite does not count groups yet: members and seals are refused by name, and nothing
/// is stored.
#[test]
fn groups_are_refused_where_the_broker_keeps_none() {
    let (url, dir) = sqlite_url("groups");
    let url = url.as_str();
    for args in [
        &["enqueue", "rows", "--group", "import", "1"][..],
        &["group", "seal", "import", "report"][..],
        &["group", "show", "import"][..],
    ] {
        let mut all = vec!["--broker", url];
        all.extend_from_slice(args);
        let out = hopper(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr.contains("does not support groups"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(stats(url, "rows"), (0, 0, 0, 0), "nothing stored");
    let bad = hopper(&["--broker", url, "enqueue", "rows", "--group", "", "1"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("group"),
        "{bad:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
