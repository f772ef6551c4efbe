//! `hopper migrate`, `hopper load` and the operator commands on the servers on 127.0.0.1:
//! PostgreSQL, MariaDB and RabbitMQ.

use std::process::Command;

use crate::operate::{Keeps, pause_from_another_process, scenario};
use crate::support::{assert_each_ran_once, hopper, load_json, refused, sizes};

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

/// Runs `sql` on the MariaDB server the tests use.
fn mariadb(sql: &str) {
    let status = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-u", "root", "-e", sql])
        .status();
    assert!(status.is_ok_and(|s| s.success()), "{sql}");
}

/// The URL of database `db` on the MariaDB server the tests use.
fn mariadb_url(db: &str) -> String {
    let base = std::env::var("HOPPER_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_owned());
    format!("{}/{db}", base.trim_end_matches("/test"))
}

#[test]
fn migrate_then_load_on_postgres() {
    let schema = format!("hopper_cli_{}", std::process::id());
    let url = postgres_url(&schema);
    let err = refused(&["load", "--broker", &url, "--jobs", "10"]);
    assert!(
        err.contains("is at version 0 but this build needs 17: run `hopper migrate --broker"),
        "{err}"
    );

    let out = hopper(&["migrate", "--broker", &url]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("applied 17 migrations"));
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
    // The default window fetches ahead of the 10 slots to cover the round trip, each fetch
    // at most max_batch (50).
    assert!(sizes(&r).iter().all(|&n| n <= 50), "{:?}", sizes(&r));
}

#[test]
fn migrate_then_load_on_mariadb() {
    let db = format!("hopper_cli_{}", std::process::id());
    mariadb(&format!("CREATE DATABASE IF NOT EXISTS {db}"));
    let url = mariadb_url(&db);
    let out = hopper(&["migrate", "--broker", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("applied 11 migrations"));
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
    assert!(sizes(&r).iter().all(|&n| n <= 50), "{:?}", sizes(&r));
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

/// Runs `body` with a scratch directory, then `cleanup` whether `body` passed or not.
fn with_cleanup(name: &str, body: impl FnOnce(&std::path::Path), cleanup: impl FnOnce()) {
    let dir = std::env::temp_dir().join(format!("hopper-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&dir)));
    cleanup();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn operate_postgres_through_the_commands() {
    let schema = format!("hopper_cli_ops_{}", std::process::id());
    let url = postgres_url(&schema);
    let body = |dir: &std::path::Path| {
        assert!(hopper(&["migrate", "--broker", &url]).status.success());
        scenario(&url, dir, Keeps::Records);
        pause_from_another_process(&url, dir);
    };
    with_cleanup("ops-pg", body, || drop_postgres_schema(&schema));
}

#[test]
fn operate_mariadb_through_the_commands() {
    let db = format!("hopper_cli_ops_{}", std::process::id());
    mariadb(&format!("CREATE DATABASE IF NOT EXISTS {db}"));
    let url = mariadb_url(&db);
    let body = |dir: &std::path::Path| {
        assert!(hopper(&["migrate", "--broker", &url]).status.success());
        scenario(&url, dir, Keeps::Records);
        pause_from_another_process(&url, dir);
    };
    with_cleanup("ops-mariadb", body, || {
        mariadb(&format!("DROP DATABASE {db}"))
    });
}

#[test]
fn operate_rabbitmq_through_the_commands() {
    let vhost = format!("hopper_cli_ops_{}", std::process::id());
    let ctl = |args: &[&str]| {
        let out = Command::new("rabbitmqctl").args(args).output();
        assert!(
            out.is_ok_and(|o| o.status.success()),
            "rabbitmqctl {args:?}"
        );
    };
    ctl(&["add_vhost", &vhost]);
    ctl(&["set_permissions", "-p", &vhost, "guest", ".*", ".*", ".*"]);
    // The server the other RabbitMQ tests use, on a vhost of this test's own.
    let base = std::env::var("HOPPER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let server = &base[..base.rfind('/').expect("an amqp:// URL")];
    let url = format!("{server}/{vhost}?declare=true");
    let body = |dir: &std::path::Path| {
        scenario(&url, dir, Keeps::Messages);
        pause_from_another_process(&url, dir);
    };
    with_cleanup("ops-amqp", body, || ctl(&["delete_vhost", &vhost]));
}
