//! Bad input and failing brokers: refused by name, with the cause, passwords hidden.

use crate::support::refused;

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
    // URLs that do not parse: one slash after the scheme, a `/` in the password.
    for url in [
        "postgres:/postgres:S3cretPW@127.0.0.1:5432/test",
        "postgres://postgres:S3cretPW/x@127.0.0.1:5432/test",
    ] {
        let err = refused(&["load", "--broker", url, "--jobs", "1"]);
        assert!(err.contains("postgres:***@127.0.0.1:5432/test"), "{err}");
        assert!(!err.contains("S3cretPW"), "{err}");
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

    let err = refused(&[
        "load",
        "--broker",
        "memory://",
        "--jobs",
        "1",
        "--rate",
        "0",
    ]);
    assert!(
        err.contains("invalid --rate `0`: allowed: 1 or more jobs a second"),
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

/// A server that accepts the connection and never answers: PostgreSQL, MySQL and AMQP URLs
/// pointed at it fail after the connect timeout naming host and port, instead of hanging:
/// 10 s by default, or what the URL's `connect_timeout` says. The three run at once.
#[test]
fn a_server_that_never_answers_is_named_after_the_connect_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and holds every connection, writing nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let urls = [
        (format!("postgres://app:s3cret@127.0.0.1:{port}/jobs"), 10),
        (
            format!("mysql://app:s3cret@127.0.0.1:{port}/jobs?connect_timeout=2"),
            2,
        ),
        (
            format!("amqp://app:s3cret@127.0.0.1:{port}/%2f?connect_timeout=3"),
            3,
        ),
    ];
    let runs: Vec<_> = urls
        .iter()
        .map(|(url, _)| {
            let url = url.clone();
            std::thread::spawn(move || refused(&["load", "--broker", &url, "--jobs", "1"]))
        })
        .collect();
    for ((url, secs), run) in urls.iter().zip(runs) {
        let err = run.join().unwrap();
        let shown = url.replace("s3cret", "***");
        // `hopper load` adds `declare=true` to an AMQP URL.
        assert!(
            err.contains(&format!("cannot connect to {shown}"))
                && err.contains(&format!("no answer within {secs} s")),
            "{url}: {err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
    }
}

/// Exit codes as `--help` documents them: 2 for bad usage (clap's refusals and values
/// Hopper refuses, with a suggestion for a mistyped command), 1 for an operation that
/// failed (a broker that cannot be reached), 0 for help.
#[test]
fn exit_codes_tell_bad_usage_from_a_failed_operation() {
    let code = |args: &[&str]| crate::support::hopper(args).status.code();
    let out = crate::support::hopper(&["demoo"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("similar") && err.contains("demo"), "{err}");
    assert_eq!(
        code(&[
            "load",
            "--broker",
            "memory://",
            "--jobs",
            "1",
            "--concurrency",
            "0"
        ]),
        Some(2)
    );
    assert_eq!(
        code(&[
            "load",
            "--broker",
            "memory://",
            "--jobs",
            "1",
            "--prefetch",
            "eager"
        ]),
        Some(2)
    );
    let unreachable = "postgres://app@127.0.0.1:1/jobs";
    assert_eq!(
        code(&["load", "--broker", unreachable, "--jobs", "1"]),
        Some(1)
    );
    let help = crate::support::hopper(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Exit codes: 0 done; 1 the operation failed"),
        "{text}"
    );
}
