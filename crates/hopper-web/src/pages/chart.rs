//! The last hour's throughput as an SVG bar chart: sixty one-minute bars, each stacked
//! completed, failed and dead, scaled to the busiest minute.

use hopper::registry::{Bucket, bucket_of};
use maud::{Markup, html};

/// Minutes shown.
const MINUTES: usize = 60;

/// Per minute of the last hour (oldest first): completed, failed, dead.
pub(super) fn per_minute(buckets: &[Bucket], now: i64) -> Vec<[u64; 3]> {
    let mut minutes = vec![[0u64; 3]; MINUTES];
    let current = bucket_of(now);
    for b in buckets {
        let age_minutes = ((current - b.at) / 60_000) as usize;
        if (0..MINUTES).contains(&age_minutes) && b.at <= current {
            let m = &mut minutes[MINUTES - 1 - age_minutes];
            m[0] += b.counts.completed;
            m[1] += b.counts.failed;
            m[2] += b.counts.dead;
        }
    }
    minutes
}

/// One bar's part: its class, place, size and tooltip.
struct Rect {
    class: &'static str,
    x: f64,
    y: f64,
    height: f64,
    title: String,
}

/// The chart of `minutes` (from [`per_minute`]), with its legend and totals.
pub(super) fn chart(minutes: &[[u64; 3]]) -> Markup {
    const CLASSES: [&str; 3] = ["completed", "failed", "dead"];
    let busiest = minutes
        .iter()
        .map(|m| m.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let totals = minutes
        .iter()
        .fold([0u64; 3], |t, m| [t[0] + m[0], t[1] + m[1], t[2] + m[2]]);
    let (width, height) = (600.0, 100.0);
    let bar = width / MINUTES as f64;
    let mut rects = Vec::new();
    for (i, m) in minutes.iter().enumerate() {
        let mut top = height;
        for (k, class) in CLASSES.into_iter().enumerate() {
            let h = m[k] as f64 / busiest as f64 * height;
            if h > 0.0 {
                top -= h;
                let ago = minutes.len() - 1 - i;
                rects.push(Rect {
                    class,
                    x: i as f64 * bar + 0.5,
                    y: top,
                    height: h,
                    title: format!("{ago} min ago: {} {class}", m[k]),
                });
            }
        }
    }
    let label = format!(
        "last hour: {} completed, {} failed, {} dead",
        totals[0], totals[1], totals[2]
    );
    html! {
        svg.chart viewBox=(format!("0 0 {width} {height}")) preserveAspectRatio="none" role="img" aria-label=(label) {
            @for r in &rects {
                rect class=(r.class) x=(format!("{:.1}", r.x)) y=(format!("{:.1}", r.y))
                    width=(format!("{:.1}", bar - 1.0)) height=(format!("{:.1}", r.height)) {
                    title { (r.title) }
                }
            }
        }
        div.legend.muted {
            span { i style="background:var(--ok)" {} "completed " (totals[0]) }
            span { i style="background:var(--warn)" {} "failed " (totals[1]) }
            span { i style="background:var(--bad)" {} "dead " (totals[2]) }
            span { "per minute, last hour" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopper::Throughput;

    #[test]
    fn buckets_fall_into_their_minute() {
        let now = 1_000_000_000_000;
        let at = |ago_s: i64| bucket_of(now) - ago_s * 1000;
        let b = |ago_s, completed| Bucket {
            at: at(ago_s),
            counts: Throughput {
                completed,
                failed: 0,
                dead: 0,
            },
        };
        let minutes = per_minute(&[b(0, 1), b(50, 2), b(60, 4), b(3590, 8), b(3600, 16)], now);
        assert_eq!(minutes.len(), 60);
        assert_eq!(minutes[59][0], 3, "this minute: the last 60 s");
        assert_eq!(minutes[58][0], 4);
        assert_eq!(minutes[0][0], 8, "59 minutes ago");
        assert_eq!(
            minutes.iter().map(|m| m[0]).sum::<u64>(),
            15,
            "an hour ago is out"
        );
    }
}
