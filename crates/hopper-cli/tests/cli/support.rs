//! Running the `hopper` binary and reading what it prints.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs the `hopper` binary with `args`, `HOPPER_BROKER` unset, to its end.
pub fn hopper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env_remove("HOPPER_BROKER")
        .output()
        .expect("the hopper binary runs")
}

/// Runs the `hopper` binary with `args` and `input` on its standard input (written from a
/// thread, so a command that stops reading cannot block the test), `HOPPER_BROKER` unset.
pub fn hopper_fed(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env_remove("HOPPER_BROKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the hopper binary runs");
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let input = input.to_owned();
    std::thread::spawn(move || std::io::Write::write_all(&mut pipe, input.as_bytes()));
    child.wait_with_output().expect("hopper runs to its end")
}

/// Runs `hopper` with `args`, which must fail; what it printed on stderr.
pub fn refused(args: &[&str]) -> String {
    let out = hopper(args);
    assert!(!out.status.success(), "hopper {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh SQLite URL in the temp directory, unique per test.
pub fn sqlite_url(name: &str) -> (String, PathBuf) {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "hopper-cli-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    (format!("sqlite://{}", dir.join("jobs.db").display()), dir)
}

/// Runs `hopper` with `args`, which must succeed; the one JSON object it printed.
pub fn load_json(args: &[&str]) -> serde_json::Value {
    let out = hopper(args);
    assert!(
        out.status.success(),
        "hopper {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

/// A load run's report says all `jobs` ran, none was lost and none ran twice.
pub fn assert_each_ran_once(report: &serde_json::Value, jobs: u64) {
    assert_eq!(report["completed"], jobs, "completed: {report}");
    assert_eq!(report["lost"], 0, "lost: {report}");
    assert_eq!(report["duplicates"], 0, "duplicates: {report}");
}

/// A load run's report's `batch_sizes`.
pub fn sizes(report: &serde_json::Value) -> Vec<u64> {
    report["batch_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}
