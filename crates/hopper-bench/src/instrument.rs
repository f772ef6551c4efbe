//! Rows that set a drain with something turned on beside the same drain without it, in
//! interleaved rounds (plain, then each variant, round after round), so the "raw" column
//! of these rows is the plain drain, and the ratio is the median of each round's variant
//! rate over its plain one:
//! - instrumentation: what a metrics recorder, and spans with a subscriber that records
//!   them, cost (`hopper load --instrument …`);
//! - features: what unique keys and ordering keys cost (`hopper load --unique-keys`,
//!   `--ordering-keys N`).

use hopper::Result;

use crate::load::hopper_load_with;
use crate::rounds::{median, median_row, ratio_spread, round_ratios};
use crate::rtt::{Route, in_scratch};
use crate::table::Row;

/// The instrumented variants, as `hopper load` takes them, and their names.
const INSTRUMENTED: [(&[&str], &str); 2] = [
    (&["--instrument", "metrics"], "metrics on"),
    (&["--instrument", "all"], "metrics and spans on"),
];

/// The features' variants, as `hopper load` takes them, and their names.
const FEATURES: [(&[&str], &str); 3] = [
    (&["--unique-keys"], "a unique key per job"),
    (&["--ordering-keys", "100000000"], "an ordering key per job"),
    (&["--ordering-keys", "1000"], "1,000 ordering keys"),
];

/// One drain to measure plain and instrumented.
struct Drain<'a> {
    url: &'a str,
    /// On a SQL server: each run in a scratch schema of its own, reached through `route`.
    scratch: Option<&'a Route>,
    jobs: usize,
    concurrency: usize,
    max_batch: usize,
    /// `--prefetch slots`; else the broker's default window.
    slots: bool,
    name: &'a str,
}

impl Drain<'_> {
    async fn once(&self, extra: &[&str]) -> Result<Row> {
        let (c, batch) = (self.concurrency, Some(self.max_batch));
        let mut args = if self.slots {
            vec!["--prefetch", "slots"]
        } else {
            vec![]
        };
        args.extend_from_slice(extra);
        let run =
            async |url: String| hopper_load_with(&url, self.jobs, c, batch, self.name, &args).await;
        let (row, _) = match self.scratch {
            Some(route) => in_scratch(self.url, route, run).await?,
            None => run(self.url.to_owned()).await?,
        };
        Ok(row)
    }

    /// `rounds` interleaved rounds of the plain drain and each of `variants`; a row per
    /// variant, whose raw column is the drain `plain` names.
    async fn rows(
        &self,
        rounds: usize,
        variants: &[(&[&str], &str)],
        plain_is: &str,
    ) -> Result<Vec<Row>> {
        let mut plain = Vec::new();
        let mut runs: Vec<Vec<Row>> = variants.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            plain.push(self.once(&[]).await?.hopper_per_s.unwrap_or(0.0));
            for ((args, _), runs) in variants.iter().zip(&mut runs) {
                runs.push(self.once(args).await?);
            }
        }
        let mut rows = Vec::new();
        for ((_, label), runs) in variants.iter().zip(runs) {
            let mut ratios = round_ratios(&runs, &plain);
            let spread = ratio_spread(&ratios);
            let mut row = median_row(runs);
            row.workload = format!("{}, {label}", self.name);
            row.raw_per_s = Some(median(&mut plain.clone()));
            row.ratio = Some(median(&mut ratios));
            row.note = format!(
                "raw: the same drain {plain_is}; medians of {rounds} interleaved rounds, \
                 ratio the median of each round's{spread}"
            );
            rows.push(row);
        }
        Ok(rows)
    }
}

/// The memory drain (c=8, `max_batch` 50, the broker's default window, as the memory row
/// of the matrix) and the PostgreSQL drain at batch 100 (window the slots), each
/// with a recorder, and with a recorder and spans, beside the same drain without either.
pub(crate) async fn instrumentation_rows(
    postgres: &str,
    memory_jobs: usize,
    postgres_jobs: usize,
    rounds: usize,
    sql_rounds: usize,
) -> Result<Vec<Row>> {
    let memory = Drain {
        url: "memory://",
        scratch: None,
        jobs: memory_jobs,
        concurrency: 8,
        max_batch: 50,
        slots: false,
        name: "memory drain, c=8",
    };
    let mut rows = memory.rows(rounds, &INSTRUMENTED, "uninstrumented").await?;
    let route = Route::to(postgres, 0.0, false).await?;
    let pg = Drain {
        url: postgres,
        scratch: Some(&route),
        jobs: postgres_jobs,
        concurrency: 100,
        max_batch: 100,
        slots: true,
        name: "postgres drain, batch 100",
    };
    rows.extend(pg.rows(sql_rounds, &INSTRUMENTED, "uninstrumented").await?);
    Ok(rows)
}

/// The PostgreSQL drain at batch 100 (window the slots) of jobs with a unique key each,
/// with an ordering key each, and with 1,000 ordering keys among them (a key's jobs one
/// at a time), beside the same drain of plain jobs. The row's rate is the drain's; its
/// enqueue rate is in `hopper load`'s report.
pub(crate) async fn feature_rows(postgres: &str, jobs: usize, rounds: usize) -> Result<Vec<Row>> {
    let route = Route::to(postgres, 0.0, false).await?;
    let pg = Drain {
        url: postgres,
        scratch: Some(&route),
        jobs,
        concurrency: 100,
        max_batch: 100,
        slots: true,
        name: "postgres drain, batch 100",
    };
    pg.rows(rounds, &FEATURES, "of jobs without keys").await
}
