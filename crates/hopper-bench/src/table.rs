//! One line of the matrix, and the table `hopper bench` prints of them.

use serde::Serialize;

/// One line of the table, and one object of the JSON array.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Row {
    /// What the row measured, as the table names it.
    pub(crate) workload: String,
    /// Jobs each run drained, or latency samples taken.
    pub(crate) jobs: usize,
    /// The raw baseline's rate, jobs a second.
    pub(crate) raw_per_s: Option<f64>,
    /// Hopper's rate, jobs a second.
    pub(crate) hopper_per_s: Option<f64>,
    /// Hopper's rate over the raw baseline's.
    pub(crate) ratio: Option<f64>,
    /// The round trip the row was measured at, in milliseconds, through a delay proxy
    /// above 0 (`--rtt`); only on the rows `--rtt` applies to, in a run at a distance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rtt_ms: Option<f64>,
    /// Hopper's rate over that of the same workload at 0 ms in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vs_0ms: Option<f64>,
    /// Median latency, in milliseconds.
    pub(crate) p50_ms: Option<f64>,
    /// 99th percentile latency, in milliseconds.
    pub(crate) p99_ms: Option<f64>,
    /// Fetches per 1,000 jobs.
    pub(crate) fetches_per_1k: Option<f64>,
    /// Settlement round trips per 1,000 jobs.
    pub(crate) settles_per_1k: Option<f64>,
    /// Peak RSS of Hopper's process, in MiB.
    pub(crate) peak_rss_mib: Option<f64>,
    /// CPU time of Hopper's process per job during the drain, in microseconds.
    pub(crate) cpu_us_per_job: Option<f64>,
    /// Context switches of Hopper's process's threads per job during the drain.
    pub(crate) switches_per_job: Option<f64>,
    /// An idle worker's statements (MySQL) or transactions (PostgreSQL) a second, as the
    /// server counts them.
    pub(crate) idle_per_s: Option<f64>,
    /// How the row was measured, and figures the columns have no room for.
    pub(crate) note: String,
}

/// Prints `rows` on stdout as one Markdown table; with a `vs 0 ms` column after the
/// ratio when a row was measured at a round trip (`--rtt`).
pub(crate) fn print_table(rows: &[Row]) {
    let num =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let rate = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}", v.round()));
    let far = rows.iter().any(|r| r.rtt_ms.is_some());
    let (vs_head, vs_rule) = if far {
        (" vs 0 ms |", "--:|")
    } else {
        ("", "")
    };
    println!(
        "| workload | jobs | raw jobs/s | Hopper jobs/s | ratio |{vs_head} p50 ms | p99 ms | fetches/1k | settles/1k | peak RSS MiB | note |"
    );
    println!("|---|--:|--:|--:|--:|{vs_rule}--:|--:|--:|--:|--:|---|");
    for r in rows {
        let vs = if far {
            format!(" {} |", num(r.vs_0ms, 2))
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {} | {} | {} |{vs} {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.jobs,
            rate(r.raw_per_s),
            rate(r.hopper_per_s),
            num(r.ratio, 2),
            num(r.p50_ms, 3),
            num(r.p99_ms, 3),
            num(r.fetches_per_1k, 1),
            num(r.settles_per_1k, 1),
            num(r.peak_rss_mib, 1),
            r.note
        );
    }
}
