//! `hopper enqueue` on SQLite: one job from the arguments with every option, a bulk of
//! JSON lines from standard input, and bad input refused by name with nothing stored.
use hopper::{JobId, JobState};

use crate::support::{hopper, hopper_fed, sqlite_url};

/// Runs `hopper enqueue` with `args` and `stdin`; exit code, stdout, stderr.
fn enqueue(url: &str, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let mut all = vec!["--broker", url, "enqueue"];
    all.extend_from_slice(args);
    let out = hopper_fed(&all, stdin);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn enqueue_takes_every_option_and_bulk_lines() {
    let (url, dir) = sqlite_url("enqueue");
    let (code, out, err) = enqueue(
        &url,
        &[
            "emails",
            r#"{"to":"a@b"}"#,
            "--priority",
            "-3",
            "--max-attempts",
            "3",
            "--header",
            "tenant=t1",
            "--header",
            "trace=x=y",
        ],
        "",
    );
    assert_eq!(code, Some(0), "{err}");
    let id: i64 = out.trim().parse().expect("one id printed");
    let lines: String = (0..100).map(|i| format!("{{\"n\":{i}}}\n\n")).collect();
    let (code, out, err) = enqueue(&url, &["emails"], &lines);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 100, "an id a line");
    let (code, _, err) = enqueue(&url, &["later", "1", "--delay", "30s"], "");
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = enqueue(&url, &["later", "2", "--at", "2999-01-01T00:00:00Z"], "");
    assert_eq!(code, Some(0), "{err}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let broker = hopper::connect(&url).await.unwrap();
        let record = broker.job(JobId(id)).await.unwrap().unwrap();
        assert_eq!(record.state, JobState::Pending);
        assert_eq!(record.job.payload, br#"{"to":"a@b"}"#);
        assert_eq!((record.job.priority, record.job.max_attempts), (-3, 3));
        assert_eq!(record.job.headers["tenant"], "t1");
        assert_eq!(record.job.headers["trace"], "x=y");
        assert_eq!(broker.counts("emails").await.unwrap().pending, 101);
        let later = broker.counts("later").await.unwrap();
        assert_eq!((later.pending, later.scheduled), (0, 2));
    });
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_input_is_refused_by_name_and_stores_nothing() {
    let (url, dir) = sqlite_url("enqueue_bad");
    for (args, stdin, named) in [
        (vec!["q", "not json"], "", "invalid PAYLOAD `not json`"),
        (
            vec!["q"],
            "{\"ok\":1}\n{broken\n",
            "invalid line 2 `{broken`",
        ),
        (
            vec!["q", "1", "--header", "novalue"],
            "",
            "invalid --header `novalue`",
        ),
        (
            vec!["q", "1", "--at", "2001-01-01T00:00:00Z"],
            "",
            "a time not in the past",
        ),
        (
            vec!["q", "1", "--at", "tomorrow"],
            "",
            "invalid --at `tomorrow`",
        ),
        (vec!["bad queue", "1"], "", "invalid queue `bad queue`"),
        (
            vec!["q", "1", "--max-attempts", "0"],
            "",
            "invalid max_attempts `0`",
        ),
        (
            vec!["q", "1", "--unique-key", ""],
            "",
            "invalid unique_key ``",
        ),
        (
            vec!["q", "1", "--unique-key", "k", "--unique-for", "0s"],
            "",
            "invalid unique period `0ns`",
        ),
        (
            vec!["q", "1", "--unique-key", "k", "--unique-for", "always"],
            "",
            "invalid --unique-for `always`",
        ),
        (
            vec!["q", "1", "--ordering-key", ""],
            "",
            "invalid ordering_key ``",
        ),
    ] {
        let (code, out, err) = enqueue(&url, &args, stdin);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(out.is_empty(), "{args:?} printed ids: {out}");
    }
    let (code, _, err) = enqueue(&url, &["q", "1", "--delay", "soon"], "");
    assert_eq!(code, Some(2), "{err}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counts = rt.block_on(async {
        let broker = hopper::connect(&url).await.unwrap();
        broker.counts("q").await.unwrap()
    });
    assert_eq!(counts, hopper::QueueCounts::default());
    assert_eq!(hopper(&["enqueue", "--help"]).status.code(), Some(0));
    std::fs::remove_dir_all(dir).ok();
}

/// `--unique-key`: a second job with the key prints the first's id and says so on stderr;
/// bulk lines with one key store one job; another key is another job.
#[test]
fn unique_keys_print_the_holder() {
    let (url, dir) = sqlite_url("enqueue_unique");
    let (code, first, err) = enqueue(&url, &["q", "1", "--unique-key", "order-7"], "");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
    let (code, again, err) = enqueue(&url, &["q", "2", "--unique-key", "order-7"], "");
    assert_eq!((code, &again), (Some(0), &first), "{err}");
    let id = first.trim();
    assert_eq!(
        err.trim(),
        format!("job {id} already holds unique key `order-7`: nothing enqueued")
    );
    let (_, bulk, _) = enqueue(&url, &["q", "--unique-key", "order-8"], "1\n2\n3\n");
    let ids: Vec<&str> = bulk.lines().collect();
    assert_eq!(ids.len(), 3, "{bulk}");
    assert!(ids[0] != id && ids.iter().all(|i| *i == ids[0]), "{bulk}");
    let (_, queued, _) = enqueue(
        &url,
        &["q", "4", "--unique-key", "order-7", "--unique-for", "1h"],
        "",
    );
    assert_eq!(
        queued, first,
        "the key is held whatever the new job's scope"
    );
    let shown = hopper(&["--broker", &url, "jobs", "show", id, "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["unique_key"], "order-7");
    let text = hopper(&["--broker", &url, "jobs", "show", id]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("unique key   order-7"), "{text}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counts = rt.block_on(async {
        let broker = hopper::connect(&url).await.unwrap();
        broker.counts("q").await.unwrap()
    });
    assert_eq!(counts.pending, 2, "order-7 and order-8");
    std::fs::remove_dir_all(dir).ok();
}

/// `--ordering-key`: lines from standard input with one key wait one behind the other, in
/// line order; `jobs show` says which waits; with `--unique-key` too, a duplicate is
/// answered with the job holding the key.
#[test]
fn ordering_keys_queue_lines_in_order() {
    let (url, dir) = sqlite_url("enqueue_ordered");
    let (code, out, err) = enqueue(&url, &["q", "--ordering-key", "acct-9"], "1\n2\n3\n");
    assert_eq!(code, Some(0), "{err}");
    let ids: Vec<&str> = out.lines().collect();
    assert_eq!(ids.len(), 3, "{out}");
    let show = |id: &str| {
        let json = hopper(&["--broker", &url, "jobs", "show", id, "--json"]);
        serde_json::from_slice::<serde_json::Value>(&json.stdout).unwrap()
    };
    let waits: Vec<_> = ids.iter().map(|id| show(id)["blocked"].clone()).collect();
    assert_eq!(waits, [false, true, true], "the first runs, the rest wait");
    assert_eq!(show(ids[2])["ordering_key"], "acct-9");
    let text = hopper(&["--broker", &url, "jobs", "show", ids[1]]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("ordering key acct-9  (waits for its turn on the key)"),
        "{text}"
    );
    // With a unique key too: stored once, heading its own key; a duplicate is not stored.
    let both = ["q", "4", "--ordering-key", "k", "--unique-key", "u"];
    let (code, out, err) = enqueue(&url, &both, "");
    assert_eq!(code, Some(0), "{err}");
    let id = out.trim().to_owned();
    let rec = show(&id);
    assert_eq!(
        (&rec["ordering_key"], &rec["unique_key"], &rec["blocked"]),
        (
            &serde_json::json!("k"),
            &serde_json::json!("u"),
            &serde_json::json!(false)
        )
    );
    let (code, again, err) = enqueue(&url, &both, "");
    assert_eq!((code, again.trim()), (Some(0), id.as_str()), "{err}");
    assert!(err.contains("already holds unique key `u`"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

/// `jobs show` prints a job's record, as text and as JSON; `queue purge` needs `--yes`
/// without a terminal, changes nothing without it, and with it deletes every job of the
/// queue and only of that queue.
#[test]
fn jobs_show_and_queue_purge() {
    let (url, dir) = sqlite_url("inspect");
    let (_, out, _) = enqueue(&url, &["q", r#"{"n":7}"#, "--header", "k=v"], "");
    let id = out.trim().to_owned();
    enqueue(&url, &["q", "2", "--delay", "1h"], "");
    enqueue(&url, &["other", "3"], "");

    let show = hopper(&["--broker", &url, "jobs", "show", &id]);
    assert_eq!(show.status.code(), Some(0));
    let text = String::from_utf8_lossy(&show.stdout);
    for line in [
        "state        pending",
        "attempts     0 of 25",
        "header       k=v",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    assert!(text.contains(r#"payload      {"n":7}"#), "{text}");
    let json = hopper(&["--broker", &url, "jobs", "show", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["payload"]["n"].as_i64()),
        (Some("pending"), Some(7))
    );
    assert_eq!(v["headers"]["k"], "v");
    let missing = hopper(&["--broker", &url, "jobs", "show", "999999"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no job 999999"));
    let bad = hopper(&["--broker", &url, "jobs", "show", "x1"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid ID `x1`"));

    // Not a terminal here: refused without --yes, and nothing is deleted.
    let refused = hopper(&["--broker", &url, "queue", "purge", "q"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--yes to purge q"));
    let purged = hopper(&["--broker", &url, "queue", "purge", "q", "--yes"]);
    assert_eq!(purged.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&purged.stdout),
        "q: 2 jobs deleted\n"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (q, other) = rt.block_on(async {
        let broker = hopper::connect(&url).await.unwrap();
        (
            broker.counts("q").await.unwrap(),
            broker.counts("other").await.unwrap(),
        )
    });
    assert_eq!((q.pending, q.scheduled), (0, 0));
    assert_eq!(other.pending, 1, "another queue's job went too");
    std::fs::remove_dir_all(dir).ok();
}
