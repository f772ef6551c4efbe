//! What a process measures of itself while it works (CPU time, context switches, peak
//! RSS: read from `/proc` on Linux, `None` where the system does not report them), and the
//! percentiles of the latencies it recorded. `hopper load` reports its drain with these,
//! and the raw RabbitMQ baseline its own.

/// The `p`th percentile (0–100) of sorted values, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// This process's peak resident set size in MiB (`VmHWM`), where the system reports it.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU time this process has used so far, every thread, user and system, in seconds
/// (`/proc/self/stat`, in clock ticks of 10 ms), where the system reports it.
pub fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_s_of_stat(&stat)
}

/// Context switches of this process's live threads so far, voluntary and not
/// (`/proc/self/task/*/status`), where the system reports them. Threads that ended are
/// not counted, so read it while the threads of interest run.
pub fn context_switches() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        // A thread may end between the listing and the read: it is left out.
        total += switches_in(&task.path().join("status")).unwrap_or(0);
    }
    Some(total)
}

/// The voluntary and involuntary context switches a `status` file of `/proc` counts.
fn switches_in(status: &std::path::Path) -> Option<u64> {
    let status = std::fs::read_to_string(status).ok()?;
    let counts = status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
    Some(counts.sum())
}

/// CPU time per item (µs) between two [`process_cpu_s`] readings, over `items`; `None`
/// where the system reports no CPU time.
pub fn cpu_us_per(before: Option<f64>, after: Option<f64>, items: u64) -> Option<f64> {
    before
        .zip(after)
        .map(|(a, b)| (b - a) * 1e6 / items.max(1) as f64)
}

/// Context switches per item between two [`context_switches`] readings, over `items`;
/// `None` where the system reports none.
pub fn switches_per(before: Option<u64>, after: Option<u64>, items: u64) -> Option<f64> {
    before
        .zip(after)
        .map(|(a, b)| b.saturating_sub(a) as f64 / items.max(1) as f64)
}

/// `utime + stime` of a `/proc/PID/stat` line, in seconds. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from the last `)`.
fn cpu_s_of_stat(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_sleeps_is_switched_out() {
        // This thread's own count: the process's moves as the other tests' threads end.
        let own = std::path::Path::new("/proc/thread-self/status");
        let Some(before) = switches_in(own) else {
            return; // no /proc here
        };
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let after = switches_in(own).expect("read once");
        assert!(after >= before + 3, "{before} then {after}");
        assert!(context_switches().is_some_and(|all| all >= after));
    }

    #[test]
    fn switches_are_counted_per_item() {
        assert_eq!(switches_per(Some(100), Some(150), 20), Some(2.5));
        assert_eq!(
            switches_per(Some(7), Some(9), 0),
            Some(2.0),
            "no items: per one"
        );
        assert_eq!(switches_per(None, Some(9), 4), None);
        assert_eq!(switches_per(Some(7), None, 4), None);
    }

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        // Fields 14 and 15 (utime 250, stime 75 ticks); the name holds ") 7 8" to mislead.
        let stat = "4242 (odd) 7 8) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 3";
        assert_eq!(cpu_s_of_stat(stat), Some(3.25));
        assert_eq!(cpu_s_of_stat("4242 (cut) S 1"), None);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
    }
}
