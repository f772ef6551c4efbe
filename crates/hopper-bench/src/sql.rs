//! The PostgreSQL and MySQL drain rows: the raw broker loop beside `hopper load`, each
//! round in scratch schemas or databases of its own, reached directly or through a delay
//! proxy (see `rtt`).

use hopper::Result;

use crate::claim_delete::raw_claim_delete;
use crate::load::hopper_load_with;
use crate::raw::raw_broker_loop;
use crate::rounds::paired_rounds;
use crate::rtt::{Route, in_scratch};
use crate::table::Row;

/// Clients of the PostgreSQL ceiling beside the wide row, as in the pgbench run it
/// reproduces.
const CEILING_CLIENTS: usize = 4;

/// One SQL row: what the raw loop fetches at a time, and how `hopper load` is run beside
/// it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SqlDrain {
    /// The row's name in the table.
    pub(crate) workload: String,
    /// The raw loop's batch.
    pub(crate) raw_batch: usize,
    /// Clients of the raw claim+delete loop, or 0 for the broker's own fetch and settle
    /// in one loop.
    raw_clients: usize,
    /// `hopper load --concurrency`.
    concurrency: usize,
    /// `hopper load --max-batch`, or none: its default.
    max_batch: Option<usize>,
    /// `hopper load --prefetch slots`, or none: the broker's default window.
    slots: bool,
}

impl SqlDrain {
    /// The bench's usual row: concurrency and `max_batch` equal to the raw loop's batch,
    /// the window the slots (`--prefetch slots`).
    pub(crate) fn at_batch(server: &str, batch: usize) -> Self {
        SqlDrain {
            workload: format!("{server} drain, batch {batch}"),
            raw_batch: batch,
            raw_clients: 0,
            concurrency: batch,
            max_batch: Some(batch),
            slots: true,
        }
    }

    /// `hopper load` as users run it: concurrency 10 (its default) and nothing else, so
    /// `max_batch` and the window are the library's defaults; beside the raw loop at a
    /// batch of 10, one job per slot.
    pub(crate) fn defaults(server: &str) -> Self {
        SqlDrain {
            workload: format!("{server} drain, defaults (c=10)"),
            raw_batch: 10,
            raw_clients: 0,
            concurrency: 10,
            max_batch: None,
            slots: false,
        }
    }

    /// Concurrency 100 with `max_batch` 100 and the default window, beside the raw loop
    /// at a batch of 100; on PostgreSQL, beside the server's ceiling instead: four clients
    /// deleting 100 jobs a transaction (`claim_delete`).
    pub(crate) fn wide(server: &str) -> Self {
        SqlDrain {
            workload: format!("{server} drain, c=100, max_batch 100"),
            raw_batch: 100,
            raw_clients: if server == "postgres" {
                CEILING_CLIENTS
            } else {
                0
            },
            concurrency: 100,
            max_batch: Some(100),
            slots: false,
        }
    }

    /// The rows of `server` (`postgres`, `mysql`): one at each of `batches`, and, with
    /// `as_users_run`, [`defaults`](Self::defaults) and [`wide`](Self::wide).
    pub(crate) fn rows(server: &str, batches: &[usize], as_users_run: bool) -> Vec<Self> {
        let mut rows: Vec<Self> = batches.iter().map(|&b| Self::at_batch(server, b)).collect();
        if as_users_run {
            rows.extend([Self::defaults(server), Self::wide(server)]);
        }
        rows
    }

    /// Jobs a round trip moves, by the raw loop and by Hopper: the raw loop's batch over
    /// the round trips of one fetch and settle (`trips`), and Hopper's fetch (its
    /// `max_batch`, by default 50) over the same, which fetches ahead keep moving. Each
    /// side's job count follows its own, so that at a distance neither drain is so short
    /// that its start dominates.
    pub(crate) fn per_round_trip(&self, trips: u32) -> (f64, f64) {
        let fetch = self
            .max_batch
            .unwrap_or(hopper::worker::DEFAULT_MAX_BATCH)
            .max(self.raw_batch);
        let hopper = if self.slots { self.raw_batch } else { fetch };
        (
            self.raw_batch as f64 / f64::from(trips),
            hopper as f64 / f64::from(trips),
        )
    }

    /// Runs the row on `server` through `route`: `rounds` interleaved rounds of the raw
    /// loop draining `raw_jobs` and `hopper load` draining `jobs`, each in a scratch schema
    /// or database of its own.
    pub(crate) async fn run(
        &self,
        server: &str,
        route: &Route,
        (raw_jobs, jobs): (usize, usize),
        rounds: usize,
    ) -> Result<Row> {
        let extra: &[&str] = if self.slots {
            &["--prefetch", "slots"]
        } else {
            &[]
        };
        let mut row = paired_rounds(
            rounds,
            true,
            async |_| {
                in_scratch(server, route, async |url| match self.raw_clients {
                    0 => raw_broker_loop(&url, raw_jobs, self.raw_batch).await,
                    n => raw_claim_delete(&url, raw_jobs, self.raw_batch, n).await,
                })
                .await
            },
            async |_| {
                in_scratch(server, route, async |url| {
                    let (c, max_batch) = (self.concurrency, self.max_batch);
                    hopper_load_with(&url, jobs, c, max_batch, &self.workload, extra).await
                })
                .await
            },
        )
        .await?;
        if raw_jobs != jobs {
            row.note = format!("{}; the raw loop drained {raw_jobs}", row.note);
        }
        if self.raw_clients > 0 {
            row.note = format!(
                "{}; raw: {} clients deleting {} pending jobs a transaction",
                row.note, self.raw_clients, self.raw_batch
            );
        } else if !self.slots {
            row.note = format!("{}; raw loop at batch {}", row.note, self.raw_batch);
        }
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The usual rows come first, in the order asked; the rows as users run them only
    /// when asked, after them.
    #[test]
    fn rows_as_users_run_them_follow_the_batches() {
        let names =
            |rows: Vec<SqlDrain>| -> Vec<String> { rows.into_iter().map(|r| r.workload).collect() };
        assert_eq!(
            names(SqlDrain::rows("mysql", &[100, 10], false)),
            ["mysql drain, batch 100", "mysql drain, batch 10"]
        );
        assert_eq!(
            names(SqlDrain::rows("postgres", &[10], true)),
            [
                "postgres drain, batch 10",
                "postgres drain, defaults (c=10)",
                "postgres drain, c=100, max_batch 100"
            ]
        );
        let defaults = SqlDrain::defaults("postgres");
        assert_eq!((defaults.max_batch, defaults.slots), (None, false));
        assert_eq!(SqlDrain::wide("postgres").raw_batch, 100);
        assert_eq!(SqlDrain::wide("postgres").raw_clients, CEILING_CLIENTS);
        assert_eq!(SqlDrain::wide("mysql").raw_clients, 0);
        // Hopper's side moves a fetch of max_batch per round trip unless held to its slots.
        assert_eq!(defaults.per_round_trip(2), (5.0, 25.0));
        assert_eq!(
            SqlDrain::at_batch("mysql", 10).per_round_trip(2),
            (5.0, 5.0)
        );
        assert_eq!(SqlDrain::wide("mysql").per_round_trip(4), (25.0, 25.0));
    }
}
