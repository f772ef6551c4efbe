//! Schemathesis (PyPI, which `.ci/run` installs when missing) generates requests from
//! `/api/openapi.json`, good and bad, against a server over an SQLite broker holding jobs,
//! and finds no server error.

use std::process::Command;

use hopper::NewJob;

use super::support::{csrf, sqlite, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error() {
    let (broker, dir) = sqlite("schemathesis").await;
    let jobs = (0..20).map(|i| NewJob::new(if i % 2 == 0 { "a" } else { "b" }, format!("{i}")));
    broker.enqueue(jobs.collect()).await.unwrap();
    broker.set_paused("b", true).await.unwrap();
    let server = start(broker, None, false).await;
    let token = csrf(&server, &[]).await;
    let base = format!("http://{}", server.addr);
    // Schemathesis keeps a cache in its working directory: the test's own, not the crate.
    let cwd = dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("schemathesis")
            .current_dir(cwd)
            .args(["run", &format!("{base}/api/openapi.json"), "--url", &base])
            .args(["--checks", "not_a_server_error", "--max-examples", "25"])
            .args(["-H", &format!("x-hopper-csrf: {token}")])
            .output()
            .expect("schemathesis (pip install schemathesis; .ci/run installs it)")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("passed"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}
