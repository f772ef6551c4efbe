//! Formatting shared by the commands: tables, times, payloads, progress bars.

use std::io::IsTerminal;
use std::time::Duration;

use comfy_table::Table;
use indicatif::{ProgressBar, ProgressStyle};

/// A table with these column headers, in plain characters (no colour codes).
pub fn table<const N: usize>(headers: [&str; N]) -> Table {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::UTF8_HORIZONTAL_ONLY)
        .set_header(headers);
    t
}

/// A time in ms since the epoch, as RFC 3339 (milliseconds).
pub fn time(ms: hopper::broker::Millis) -> String {
    humantime::format_rfc3339_millis(hopper::broker::from_millis(ms)).to_string()
}

/// A duration rounded to what a person reads at a glance: `850ms`, `12s`, `3m 4s`.
pub fn span(d: Duration) -> String {
    let rounded = if d < Duration::from_secs(1) {
        Duration::from_millis(d.as_millis() as u64)
    } else {
        Duration::from_secs(d.as_secs())
    };
    humantime::format_duration(rounded).to_string()
}

/// The payload as text when it is UTF-8, else as hex bytes.
pub fn payload_text(payload: &[u8]) -> String {
    match std::str::from_utf8(payload) {
        Ok(text) => text.to_owned(),
        Err(_) => payload.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// A progress bar of `len` steps on standard error when it is a terminal; hidden when it
/// is piped, so nothing but the command's output reaches a pipe.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let template = format!("  {{bar:40}} {{pos}}/{{len}} {what}");
    bar.set_style(
        ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Run-length form of a size list, for runs of three or more: `1 1 16 16 16 10` →
/// `1 1 16 ×3 10`.
pub fn run_lengths(sizes: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sizes.len() {
        let mut j = i;
        while j < sizes.len() && sizes[j] == sizes[i] {
            j += 1;
        }
        match j - i {
            n @ (1 | 2) => out.extend(std::iter::repeat_n(sizes[i].to_string(), n)),
            n => out.push(format!("{} ×{n}", sizes[i])),
        }
        i = j;
    }
    out.join(" ")
}

/// Prints a load's report as the table `hopper load` shows without `--json`.
pub fn print_load(r: &hopper_bench::load::Report) {
    println!("broker          {}", r.broker);
    println!("jobs            {}", r.jobs);
    println!("completed       {}", r.completed);
    println!("lost            {}", r.lost);
    println!("duplicates      {}", r.duplicates);
    println!(
        "workers         {} × concurrency {} (prefetch {})",
        r.workers, r.concurrency, r.prefetch
    );
    if r.enqueue_s > 0.0 {
        println!(
            "enqueue         {:.3} s ({:.0} jobs/s)",
            r.enqueue_s,
            r.jobs as f64 / r.enqueue_s
        );
    } else {
        println!("enqueue         none (--prefilled)");
    }
    println!("drain           {:.3} s", r.drain_s);
    println!("throughput      {:.0} jobs/s", r.jobs_per_s);
    if let Some(cpu) = r.cpu_us_per_job {
        println!("cpu             {cpu:.2} µs per job (this process, drain only)");
    }
    if let Some(switches) = r.switches_per_job {
        println!("switches        {switches:.2} per job (context switches, drain only)");
    }
    println!(
        "fetches         {} ({:.1} jobs per fetch)",
        r.fetches, r.jobs_per_fetch
    );
    println!("settlements     {} round trips", r.settle_calls);
    println!(
        "pool tasks      {} started ({:.1} jobs per hand-off, {} hand-offs on the event loop)",
        r.pool_tasks_started, r.jobs_per_handoff, r.inline_handoffs
    );
    println!(
        "latency         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (enqueue to start)",
        r.latency_ms.p50, r.latency_ms.p99, r.latency_ms.max
    );
    let shown: Vec<u32> = r.batch_sizes.iter().take(40).copied().collect();
    let more = if r.batch_sizes.len() > 40 { " …" } else { "" };
    println!("batch sizes     {}{more}", run_lengths(&shown));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_lengths_group_repeats() {
        assert_eq!(
            run_lengths(&[1, 1, 2, 2, 16, 16, 16, 10]),
            "1 1 2 2 16 ×3 10"
        );
        assert_eq!(run_lengths(&[]), "");
    }
}
