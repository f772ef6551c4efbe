//! The checker: from the ids enqueued, the run lines every worker process logged and what
//! the broker still holds, how many jobs completed, died, were lost or ran more than once.
//!
//! A worker logs a line when a handler *starts* (see [`RunLine`]), so a job run twice shows
//! as two lines, whether or not the first run finished. After a fault the jobs that can run
//! again are those the faulted workers held without a committed settlement. That is more
//! than the window: a finished job's slot is refilled at once while its settlement waits
//! for the next batch, and a slow settlement round trip lets many jobs finish behind it. So
//! the tests *measure* what was held at each fault instead of assuming it:
//! - SQL brokers: the broker's `leased` count, read just after a SIGKILL (the dead worker
//!   can settle nothing more; the live workers' leases only loosen the bound) or just
//!   before a server fault, plus one window per worker ([`window`]) for jobs claimed
//!   between that reading and the fault.
//! - RabbitMQ: one window per connection cut, since the server delivers no more than the
//!   `basic.qos` window unacknowledged, finished jobs whose acks are held included.
//!
//! The bound is the sum over the faults; a test passes it to [`check`].

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One run of one job as a worker logged it when it started: `<id> <attempt> <unix µs>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLine {
    /// The job's payload: its number in `0..enqueued`.
    pub id: u64,
    /// The broker's attempt number for this run.
    pub attempt: u32,
    /// When the handler started, in microseconds since the Unix epoch.
    pub at_micros: u64,
}

impl RunLine {
    /// A line for `id` starting now.
    pub fn now(id: u64, attempt: u32) -> RunLine {
        RunLine {
            id,
            attempt,
            at_micros: unix_micros(SystemTime::now()),
        }
    }

    /// The line as written, newline included.
    pub fn to_line(&self) -> String {
        format!("{} {} {}\n", self.id, self.attempt, self.at_micros)
    }

    /// Reads a line written by [`to_line`](Self::to_line); `None` for anything else.
    pub fn parse(line: &str) -> Option<RunLine> {
        let mut f = line.split_whitespace();
        let line = RunLine {
            id: f.next()?.parse().ok()?,
            attempt: f.next()?.parse().ok()?,
            at_micros: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(line)
    }
}

/// The end of one run: `<id> <attempt> <start µs> <end µs>`, written when the handler's
/// future ends or is dropped. A run of a process killed meanwhile has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd {
    /// The run it ends.
    pub run: RunLine,
    /// When it ended, in microseconds since the Unix epoch.
    pub end_micros: u64,
}

impl RunEnd {
    /// The end of `run`, now.
    pub fn now(run: RunLine) -> RunEnd {
        RunEnd {
            run,
            end_micros: unix_micros(SystemTime::now()),
        }
    }

    /// The line as written, newline included.
    pub fn to_line(&self) -> String {
        let r = self.run;
        format!(
            "{} {} {} {}\n",
            r.id, r.attempt, r.at_micros, self.end_micros
        )
    }

    /// Reads a line written by [`to_line`](Self::to_line); `None` for anything else.
    pub fn parse(line: &str) -> Option<RunEnd> {
        let mut f = line.split_whitespace();
        let end = RunEnd {
            run: RunLine {
                id: f.next()?.parse().ok()?,
                attempt: f.next()?.parse().ok()?,
                at_micros: f.next()?.parse().ok()?,
            },
            end_micros: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(end)
    }
}

/// One job run by two processes at once: its id, and each run's `(start, end)` in µs.
pub type Overlap = (u64, (u64, u64), (u64, u64));

/// Runs of one job by two processes at once: for each process, the runs it ended; for
/// each pair of runs of one id by different processes whose times overlap, the id and
/// the two `(start, end)` intervals. A run without an end (its process was killed) is
/// not counted: a dead process runs nothing.
pub fn overlaps(per_process: &[Vec<RunEnd>]) -> Vec<Overlap> {
    let mut by_id: std::collections::BTreeMap<u64, Vec<(usize, u64, u64)>> = Default::default();
    for (p, ends) in per_process.iter().enumerate() {
        for e in ends {
            by_id
                .entry(e.run.id)
                .or_default()
                .push((p, e.run.at_micros, e.end_micros));
        }
    }
    let mut out = Vec::new();
    for (id, runs) in by_id {
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                if a.0 != b.0 && a.1 < b.2 && b.1 < a.2 {
                    out.push((id, (a.1, a.2), (b.1, b.2)));
                }
            }
        }
    }
    out
}

/// Microseconds since the Unix epoch.
pub fn unix_micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The complete lines of a log a process may still be appending to: a read beside a write
/// can see part of it (one `write` per line keeps writers from interleaving, not readers
/// from seeing a line half copied), so text after the last newline is left for later.
fn complete_lines(text: &str) -> &str {
    text.rfind('\n').map_or("", |end| &text[..=end])
}

/// Every complete run line of one log file. Lines never interleave (one `write` per line),
/// so a complete line that does not parse is a bug and panics.
pub fn read_log(path: &Path) -> Vec<RunLine> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("reading {}: {e}", path.display()),
    };
    complete_lines(&text)
        .lines()
        .filter(|l| RunEnd::parse(l).is_none())
        .map(|l| {
            RunLine::parse(l).unwrap_or_else(|| panic!("bad line {l:?} in {}", path.display()))
        })
        .collect()
}

/// The ends of runs of one log file ([`RunEnd`]).
pub fn read_ends(path: &Path) -> Vec<RunEnd> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    complete_lines(&text)
        .lines()
        .filter_map(RunEnd::parse)
        .collect()
}

/// The window of a `chaos-worker` of `concurrency` handlers (it fixes its prefetch there).
pub fn window(concurrency: usize) -> u64 {
    concurrency as u64
}

/// What the broker reports at the end of a scenario.
#[derive(Debug, Clone, Default)]
pub struct BrokerEnd {
    /// Jobs still waiting, scheduled or leased: 0 once the backlog drained.
    pub left: u64,
    /// The dead letters' ids when the broker lists them, else only their number.
    pub dead_ids: Option<Vec<u64>>,
    /// How many jobs are dead-lettered.
    pub dead: u64,
}

/// One scenario's figures: one row of the table.
#[derive(Debug, Clone)]
pub struct Report {
    /// What was done, e.g. `SIGKILL ×3, 3 workers`.
    pub scenario: String,
    /// The broker's name.
    pub broker: String,
    /// Faults injected.
    pub faults: u32,
    /// Jobs enqueued, ids `0..enqueued`.
    pub enqueued: u64,
    /// Distinct ids that ran and are no longer pending (nor dead).
    pub completed: u64,
    /// Dead-lettered jobs.
    pub dead: u64,
    /// Ids that never ran, are not dead, and are no longer anywhere in the broker.
    pub lost: u64,
    /// Jobs still in the broker (0 after a drain).
    pub left: u64,
    /// Runs beyond each id's first.
    pub duplicated: u64,
    /// The most duplicates the faults allow (see the module doc).
    pub bound: u64,
    /// The longest time a fault kept work from resuming (what each scenario measures: the
    /// crate README).
    pub recovery: Option<Duration>,
    /// Ids outside `0..enqueued` that were logged (always 0 unless something is broken).
    pub strays: u64,
}

/// Tallies `runs` against ids `0..enqueued` and the broker's `end`.
pub fn check(
    scenario: impl Into<String>,
    broker: impl Into<String>,
    enqueued: u64,
    runs: &[RunLine],
    end: &BrokerEnd,
    faults: u32,
    bound: u64,
) -> Report {
    let mut count = vec![0u64; enqueued as usize];
    let mut strays = 0;
    for r in runs {
        match count.get_mut(r.id as usize) {
            Some(c) => *c += 1,
            None => strays += 1,
        }
    }
    let dead_set: BTreeSet<u64> = end.dead_ids.iter().flatten().copied().collect();
    let ran = |id: usize| count[id] > 0;
    let completed = (0..count.len())
        .filter(|&id| ran(id) && !dead_set.contains(&(id as u64)))
        .count() as u64;
    let never_ran = (0..count.len()).filter(|&id| !ran(id)).count() as u64;
    // Dead jobs that never ran (a broker that lists no ids: assume every dead job is one).
    let dead_unrun = match &end.dead_ids {
        Some(ids) => ids.iter().filter(|&&id| !ran(id as usize)).count() as u64,
        None => end.dead,
    };
    let lost = never_ran.saturating_sub(dead_unrun + end.left);
    Report {
        scenario: scenario.into(),
        broker: broker.into(),
        faults,
        enqueued,
        completed,
        dead: end.dead,
        lost,
        left: end.left,
        duplicated: count.iter().map(|&c| c.saturating_sub(1)).sum(),
        bound,
        recovery: None,
        strays,
    }
}

impl Report {
    /// The table's header, two lines of Markdown.
    pub const HEADER: &'static str = "| broker | scenario | faults | jobs | completed | dead | \
                                      lost | duplicated (bound) | recovery |\n\
                                      |---|---|---|---|---|---|---|---|---|";

    /// Prints the header and this row to stderr (run the tests with `--nocapture`).
    pub fn print(&self) {
        eprintln!("{}\n{self}", Report::HEADER);
    }

    /// Panics unless nothing was lost, every job completed, nothing was left and the
    /// duplicates stayed within the bound.
    pub fn assert_sound(&self) {
        assert_eq!(
            self.strays, 0,
            "ids outside the enqueued range ran: {self:?}"
        );
        assert_eq!(self.left, 0, "jobs left in the broker: {self:?}");
        assert_eq!(self.lost, 0, "jobs lost: {self:?}");
        assert_eq!(self.dead, 0, "jobs dead-lettered: {self:?}");
        assert_eq!(
            self.completed, self.enqueued,
            "not every job completed: {self:?}"
        );
        assert!(
            self.duplicated <= self.bound,
            "more duplicates than the faults allow: {self:?}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let recovery = self
            .recovery
            .map_or_else(|| "-".to_owned(), |d| format!("{} ms", d.as_millis()));
        write!(
            f,
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} |",
            self.broker,
            self.scenario,
            self.faults,
            self.enqueued,
            self.completed,
            self.dead,
            self.lost,
            self.duplicated,
            self.bound,
            recovery
        )
    }
}

/// The `q`-quantile (0..=1) of `sorted`, nearest rank; `None` when empty.
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_still_being_written_is_left_for_later() {
        assert_eq!(complete_lines("a 1\nb 2\n253"), "a 1\nb 2\n");
        assert_eq!(complete_lines("a 1\n"), "a 1\n");
        assert_eq!(complete_lines("253"), "");
    }

    fn line(id: u64) -> RunLine {
        RunLine {
            id,
            attempt: 1,
            at_micros: 7,
        }
    }

    #[test]
    fn lines_round_trip_and_junk_is_refused() {
        let l = RunLine {
            id: 42,
            attempt: 3,
            at_micros: 1_700_000_000_000_000,
        };
        assert_eq!(RunLine::parse(l.to_line().trim_end()), Some(l));
        assert_eq!(RunLine::parse("42 3"), None);
        assert_eq!(RunLine::parse("42 3 1 9"), None);
        assert_eq!(RunLine::parse("x 3 1"), None);
    }

    #[test]
    fn the_checker_counts_lost_dead_left_and_duplicated_ids() {
        // 0 ran twice, 1 once, 2 is dead without running, 3 is still queued, 4 vanished.
        let runs = [line(0), line(0), line(1), line(9)];
        let end = BrokerEnd {
            left: 1,
            dead_ids: Some(vec![2]),
            dead: 1,
        };
        let r = check("s", "b", 5, &runs, &end, 1, 4);
        assert_eq!(
            (r.completed, r.dead, r.lost, r.left, r.duplicated, r.strays),
            (2, 1, 1, 1, 1, 1)
        );
        let end = BrokerEnd {
            left: 0,
            dead_ids: None,
            dead: 0,
        };
        let r = check("s", "b", 2, &runs[..3], &end, 1, 1);
        r.assert_sound();
        assert_eq!(r.to_string(), "| b | s | 1 | 2 | 2 | 0 | 0 | 1 (1) | - |");
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
