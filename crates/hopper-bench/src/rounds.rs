//! Interleaved rounds and their medians: a row's rates are medians over its rounds, its
//! ratio the median of each round's own, so that a round in one of a server's fast spells
//! is never set against one in a slow spell.

use hopper::Result;

use crate::table::Row;

/// Rounds of the SQL rows: each drain lasts seconds, and a PostgreSQL or MySQL round of all
/// its batch sizes most of a minute.
pub(crate) const SQL_ROUNDS: usize = 3;

/// `rounds` interleaved runs of the raw broker loop and of `hopper load` (each given its
/// round): the median Hopper run beside the median raw rate, the ratio the median of each
/// round's (see [`paired_ratio`]). The note names the rounds when there are several and,
/// with `show_enqueue`, gives the median enqueue rate.
pub(crate) async fn paired_rounds(
    rounds: usize,
    show_enqueue: bool,
    mut raw: impl AsyncFnMut(usize) -> Result<f64>,
    mut hopper: impl AsyncFnMut(usize) -> Result<(Row, f64)>,
) -> Result<Row> {
    let (mut raws, mut runs, mut enqueues) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        raws.push(raw(round).await?);
        let (row, enqueue) = hopper(round).await?;
        runs.push(row);
        enqueues.push(enqueue);
    }
    let ratio = paired_ratio(&runs, &raws);
    let mut row = median_row(runs);
    row.raw_per_s = Some(median(&mut raws));
    row.ratio = Some(ratio);
    let rounds = match rounds {
        1 => String::new(),
        n => format!("medians of {n} interleaved rounds, ratio the median of each round's; "),
    };
    let enqueue = if show_enqueue {
        format!("; enqueue {:.0}/s", median(&mut enqueues))
    } else {
        String::new()
    };
    row.note = format!("{rounds}raw: broker fetch+settle loop{enqueue}");
    Ok(row)
}

/// The median of each round's Hopper rate over that round's raw rate. The server moves
/// between a slow and a fast mode that lasts a few seconds (one raw loop drained at 30k
/// and at 50k msgs/s in consecutive rounds on 1 December), so a ratio of the two medians
/// could set a fast raw round against a slow Hopper one.
pub(crate) fn paired_ratio(hopper: &[Row], raw: &[f64]) -> f64 {
    median(&mut round_ratios(hopper, raw))
}

/// Each round's Hopper rate over that round's raw rate, in round order.
pub(crate) fn round_ratios(hopper: &[Row], raw: &[f64]) -> Vec<f64> {
    hopper
        .iter()
        .zip(raw)
        .map(|(h, r)| h.hopper_per_s.unwrap_or(0.0) / r)
        .collect()
}

/// `; rounds' ratios LOW–HIGH`, the spread the median was taken from; nothing for one round.
pub(crate) fn ratio_spread(ratios: &[f64]) -> String {
    if ratios.len() < 2 {
        return String::new();
    }
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("; rounds' ratios {low:.2}–{high:.2}")
}

/// The middle value of `rates`.
pub(crate) fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// The run of median Hopper rate, with all its figures (latency, round trips, RSS).
pub(crate) fn median_row(mut runs: Vec<Row>) -> Row {
    runs.sort_by(|a, b| {
        a.hopper_per_s
            .unwrap_or(0.0)
            .total_cmp(&b.hopper_per_s.unwrap_or(0.0))
    });
    runs.swap_remove(runs.len() / 2)
}

/// `; {what}: raw R, Hopper H`, the medians of each side's runs to `decimals` places;
/// nothing when either side has none (a system that does not report the figure).
pub(crate) fn raw_beside_hopper(
    what: &str,
    decimals: usize,
    mut raw: Vec<f64>,
    mut hopper: Vec<f64>,
) -> String {
    if raw.is_empty() || hopper.is_empty() {
        return String::new();
    }
    format!(
        "; {what}: raw {:.decimals$}, Hopper {:.decimals$}",
        median(&mut raw),
        median(&mut hopper)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rate: f64, p50: f64) -> Row {
        Row {
            workload: "w".into(),
            jobs: 1,
            raw_per_s: None,
            hopper_per_s: Some(rate),
            ratio: None,
            rtt_ms: None,
            vs_0ms: None,
            p50_ms: Some(p50),
            p99_ms: None,
            fetches_per_1k: None,
            settles_per_1k: None,
            peak_rss_mib: None,
            cpu_us_per_job: None,
            switches_per_job: None,
            idle_per_s: None,
            note: String::new(),
        }
    }

    /// A round whose mode flipped between its raw run and Hopper's moves the ratio of the
    /// medians (45 / 31 = 1.45 here) but not the median of the rounds' ratios (0.9, 0.9 and
    /// 1.45).
    #[test]
    fn the_ratio_pairs_each_round_with_its_own_raw_run() {
        let hopper = [row(45.0, 1.0), row(27.0, 1.0), row(45.0, 1.0)];
        let raw = [50.0, 30.0, 31.0];
        assert!((paired_ratio(&hopper, &raw) - 0.9).abs() < 1e-9);
    }

    /// The note's spread runs from the lowest round's ratio to the highest, whatever their
    /// order; one round has no spread.
    #[test]
    fn the_spread_names_the_lowest_and_highest_round() {
        let ratios = round_ratios(
            &[row(45.0, 1.0), row(24.0, 1.0), row(33.0, 1.0)],
            &[50.0, 20.0, 30.0],
        );
        assert_eq!(ratio_spread(&ratios), "; rounds' ratios 0.90–1.20");
        assert_eq!(ratio_spread(&ratios[..1]), "");
    }

    /// Each side's median, to the places asked; nothing when a side has no figure.
    #[test]
    fn raw_beside_hopper_gives_each_sides_median() {
        let note = raw_beside_hopper("switches", 2, vec![1.5, 0.25, 3.0], vec![0.5, 0.75, 0.6]);
        assert_eq!(note, "; switches: raw 1.50, Hopper 0.60");
        let note = raw_beside_hopper("CPU", 1, vec![17.04], vec![18.21, 19.0, 18.0]);
        assert_eq!(note, "; CPU: raw 17.0, Hopper 18.2");
        assert_eq!(raw_beside_hopper("CPU", 1, vec![], vec![1.0]), "");
        assert_eq!(raw_beside_hopper("CPU", 1, vec![1.0], vec![]), "");
    }

    /// The median run is kept whole: its rate and the figures measured with it.
    #[test]
    fn median_row_keeps_the_middle_run() {
        let runs = vec![
            row(3.0, 30.0),
            row(1.0, 10.0),
            row(5.0, 50.0),
            row(2.0, 20.0),
            row(4.0, 40.0),
        ];
        let m = median_row(runs);
        assert_eq!((m.hopper_per_s, m.p50_ms), (Some(3.0), Some(30.0)));
        assert_eq!(median(&mut [4.0, 1.0, 3.0]), 3.0);
    }
}
