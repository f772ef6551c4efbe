//! `hopper demo` on the embedded default.

use crate::support::{hopper, sqlite_url};

#[test]
fn the_demo_passes_on_the_embedded_default() {
    let (url, dir) = sqlite_url("demo");
    let out = hopper(&["demo", "--broker", &url]);
    std::fs::remove_dir_all(dir).ok();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("batch sizes    1 ×40"), "{text}");
    assert!(text.contains("batch sizes    1 1 2 2 4 4 8 8 "), "{text}");
    assert!(text.contains("batch sizes    1 ×10"), "{text}");
    assert!(text.trim_end().ends_with("PASS: 5 checks"), "{text}");
    assert!(!text.contains("FAIL"));
}
