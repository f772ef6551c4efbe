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
