//! `hopper cron list` on SQLite: two workers of a program hold the same schedule and one
//! holds another; the command lists both schedules, merged by name, with their next and
//! latest slots and how many workers hold each.

use std::time::Duration;

use hopper::{Missed, NewJob, Schedule, Worker};

use super::support::{hopper, sqlite_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_list_shows_the_schedules_live_workers_hold() {
    let (url, dir) = sqlite_url("cron");
    let broker = hopper::connect(&url).await.unwrap();
    let tick = || {
        let job = NewJob::json("ticks", &"tick").unwrap();
        Schedule::every("tick", Duration::from_secs(1), job)
            .unwrap()
            .missed(Missed::RunOnce)
    };
    let nightly = Schedule::cron(
        "nightly",
        "0 30 3 * * *",
        NewJob::json("reports", &1).unwrap(),
    )
    .unwrap()
    .time_zone("Europe/Paris")
    .unwrap();
    let start = |schedules: Vec<Schedule>| {
        let mut b = Worker::builder(broker.clone()).heartbeat(Duration::from_millis(200));
        for s in schedules {
            b = b.schedule(s);
        }
        b.start().unwrap()
    };
    let workers = [start(vec![tick(), nightly]), start(vec![tick()])];
    // Both have reported once a slot of `tick` has passed since they started.
    let listed = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let out = hopper(&["--broker", &url, "cron", "list", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let tick = &listed[1];
        if tick["workers"] == 2 && tick["last_at"].is_i64() {
            break listed;
        }
    };
    let nightly = &listed[0];
    assert_eq!(
        (
            &nightly["name"],
            &nightly["queue"],
            &nightly["spec"],
            &nightly["workers"]
        ),
        (
            &serde_json::json!("nightly"),
            &serde_json::json!("reports"),
            &serde_json::json!("0 30 3 * * * (Europe/Paris)"),
            &serde_json::json!(1)
        )
    );
    let (next, last) = (
        listed[1]["next_at"].as_i64().unwrap(),
        listed[1]["last_at"].as_i64().unwrap(),
    );
    assert_eq!(next % 1000, 0, "slots of a second fall on whole seconds");
    assert!(next > last, "next {next} after latest {last}");
    assert!(nightly["last_at"].is_null(), "no night has come");
    let text = hopper(&["--broker", &url, "cron", "list"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("every 1s") && text.contains("Europe/Paris"),
        "{text}"
    );
    for w in workers {
        w.shutdown().await;
    }
    let out = hopper(&["--broker", &url, "cron", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no live worker holds a schedule"
    );
    std::fs::remove_dir_all(dir).ok();
}
