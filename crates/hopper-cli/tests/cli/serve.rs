//! `hopper serve`: refused beyond loopback without a token; serving the API over a broker
//! whose URL holds a password, which no answer and no log line shows, and its `/metrics`.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use crate::support::{hopper, refused};

#[test]
fn serve_refuses_a_bind_beyond_loopback_without_a_token() {
    let out = hopper(&["serve", "--bind", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2), "bad usage");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--bind") && err.contains("--token"), "{err}");
    let err = refused(&["serve", "--bind", "127.0.0.1:0", "--token", ""]);
    assert!(err.contains("--token"), "{err}");
}

/// `GET path` on `addr` over a plain socket: the whole answer.
fn get(addr: &str, path: &str, token: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn serve_answers_without_showing_the_broker_password() {
    let schema = format!("hopper_cli_serve_{}", std::process::id());
    let base = std::env::var("HOPPER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    // The test server trusts local connections, so any password is accepted and none may
    // be shown.
    let url = format!(
        "{}?schema={schema}",
        base.replacen("postgres@", "postgres:hunter2@", 1)
    );
    assert!(hopper(&["migrate", "--broker", &url]).status.success());
    assert!(
        hopper(&["--broker", &url, "enqueue", "q", "1"])
            .status
            .success()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "--broker",
            &url,
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--token",
            "t0k",
        ])
        .env("RUST_LOG", "debug")
        .env_remove("HOPPER_BROKER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("the address in {first:?}"))
        .to_owned();
    let mut answers = String::new();
    for path in ["/api/session", "/api/queues", "/api/workers", "/api/jobs/1"] {
        let answer = get(&addr, path, "t0k");
        assert!(
            answer.starts_with("HTTP/1.1 200") || path == "/api/jobs/1",
            "{path}: {answer}"
        );
        answers.push_str(&answer);
    }
    assert!(answers.contains("\"broker\":\"postgres\""), "{answers}");
    // `/metrics` parses as Prometheus text and counts the pending job once sampled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let answer = get(&addr, "/metrics", "t0k");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        let lines = body.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("/metrics parses");
        let pending = scrape.samples.iter().find(|s| {
            s.metric == "hopper_queue_jobs"
                && s.labels.get("queue") == Some("q")
                && s.labels.get("state") == Some("pending")
        });
        if let Some(sample) = pending {
            assert!(
                matches!(sample.value, prometheus_parse::Value::Gauge(v) if v == 1.0),
                "{body}"
            );
            answers.push_str(&body);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no queue gauge in {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "stopped cleanly on SIGTERM");
    let logs = String::from_utf8_lossy(&out.stderr);
    Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc"])
        .arg(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .output()
        .unwrap();
    for (what, text) in [
        ("answers", answers.as_str()),
        ("logs", &logs),
        ("stdout", &first),
    ] {
        assert!(
            !text.contains("hunter2"),
            "the password in the {what}: {text}"
        );
    }
}
