//! How the workers taking a queue fetch: per worker, the window over the last ten minutes
//! as a line, the sizes of its fetches as a histogram by power of two, and the latest
//! sizes in order, where an adaptive window growing from one (1 1 2 2 4 4 8 …) shows.

use maud::{Markup, html};

use crate::timeline::Track;

/// Histogram bins: 1, 2–3, 4–7, … 512–1023, 1024 and more.
const BINS: usize = 11;

fn bin(size: u32) -> usize {
    (size.max(1).ilog2() as usize).min(BINS - 1)
}

fn bin_label(i: usize) -> String {
    match i {
        0 => "1".into(),
        i if i == BINS - 1 => format!("{}+", 1 << i),
        i => format!("{}–{}", 1 << i, (1 << (i + 1)) - 1),
    }
}

/// `1 1 2 2 16 16 16` as `1 1 2 2 16 ×3`.
fn run_lengths(sizes: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sizes.len() {
        let j = sizes[i..].iter().take_while(|&&s| s == sizes[i]).count() + i;
        match j - i {
            n @ (1 | 2) => out.extend(std::iter::repeat_n(sizes[i].to_string(), n)),
            n => out.push(format!("{} ×{n}", sizes[i])),
        }
        i = j;
    }
    out.join(" ")
}

/// How many of `sizes` fall in each bin.
fn histogram(sizes: &[u32]) -> [u64; BINS] {
    let mut bins = [0u64; BINS];
    for &s in sizes {
        bins[bin(s)] += 1;
    }
    bins
}

/// The window over time as an SVG line.
fn window_line(track: &Track) -> Markup {
    let (width, height) = (300.0, 60.0);
    let points = &track.points;
    let top = points.iter().map(|p| p.window).max().unwrap_or(1).max(1) as f64;
    let first = points.first().map_or(0, |p| p.at) as f64;
    let span = (points.last().map_or(0, |p| p.at) as f64 - first).max(1.0);
    let line: Vec<String> = points
        .iter()
        .map(|p| {
            let x = (p.at as f64 - first) / span * width;
            let y = height - p.window as f64 / top * (height - 4.0) - 2.0;
            format!("{x:.1},{y:.1}")
        })
        .collect();
    html! {
        svg.chart.window viewBox=(format!("0 0 {width} {height}")) preserveAspectRatio="none"
            role="img" aria-label=(format!("window over time, at most {top}")) style="height:60px" {
            polyline points=(line.join(" ")) fill="none" stroke="var(--accent)" stroke-width="2" {}
        }
    }
}

/// Per worker taking the queue: its window, fetch-size histogram and latest sizes.
pub(super) fn fetching(tracks: &[Track]) -> Markup {
    html! {
        @if tracks.is_empty() {
            p.muted { "No worker has reported fetching this queue in the last ten minutes." }
        }
        @for t in tracks {
            @let sizes: Vec<u32> = t.points.iter().flat_map(|p| p.fetches.iter().copied()).collect();
            @let bins = histogram(&sizes);
            @let most = bins.iter().copied().max().unwrap_or(0).max(1);
            @let latest = t.points.iter().rev().find(|p| !p.fetches.is_empty());
            div.track data-worker=(t.worker) {
                h3 { (t.host) " " span.muted { "pid " (t.pid) } }
                div.muted { "window now " (t.points.last().map_or(0, |p| p.window)) ", over the last ten minutes:" }
                (window_line(t))
                table.histogram {
                    thead { tr { th { "fetch size" } th.num { "fetches" } th {} } }
                    tbody {
                        @for (i, n) in bins.iter().enumerate() {
                            @if *n > 0 {
                                tr {
                                    td { (bin_label(i)) }
                                    td.num { (n) }
                                    td { span.bar style=(format!("width:{}%", n * 100 / most)) {} }
                                }
                            }
                        }
                    }
                }
                @if let Some(p) = latest {
                    p { "Latest fetches, in order: " code.sizes { (run_lengths(&p.fetches)) } }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fall_into_power_of_two_bins() {
        assert_eq!(
            [1, 2, 3, 4, 7, 8, 1023, 1024, 5000].map(bin),
            [0, 1, 1, 2, 2, 3, 9, 10, 10]
        );
        assert_eq!(bin_label(0), "1");
        assert_eq!(bin_label(3), "8–15");
        assert_eq!(bin_label(10), "1024+");
        assert_eq!(
            run_lengths(&[1, 1, 2, 2, 16, 16, 16, 10]),
            "1 1 2 2 16 ×3 10"
        );
    }
}
