//! The rows measured at a distance (`--rtt`): the PostgreSQL, MySQL and RabbitMQ rows run
//! again with every connection, the raw baseline's and the `hopper load` child's, through
//! a [`DelayProxy`] in front of the server that delays each direction by half the round
//! trip. Scratch schemas and databases are still made and dropped on direct connections;
//! migrations, backlogs and drains go through the proxy.
//!
//! Job counts shrink with the distance, so that a run stays short: at a round trip of `r`
//! ms a row keeps at most `k × 3,000 / r` jobs, `k` being what a side moves per round
//! trip. For RabbitMQ that is the window, which the consumer has in flight each round
//! trip; for the SQL loop a batch over the round trips one fetch and settle take, and for
//! Hopper's side of a SQL row its fetch over the same (`SqlDrain::per_round_trip`):
//! PostgreSQL 3 (a statement each, and the settle's commit), MySQL 8 (a claim is a
//! transaction of several statements), as measured through the proxy at 1 and 5 ms. Its
//! raw drain then lasts about [`DRAIN_AT_RTT`]; never more jobs than at 0 ms, and
//! `--scale` applies on top as everywhere.

use std::time::Duration;

use hopper::{Error, Result};

use crate::amqp::round_trips_ms as amqp_round_trips_ms;
use crate::proxy::{DelayProxy, upstream_of};
use crate::rounds::median;
use crate::scratch::{AdminConn, Scratch};
use crate::table::Row;

/// About how long a raw drain lasts at a round-trip time above 0 (see the module's
/// documentation).
pub(crate) const DRAIN_AT_RTT: Duration = Duration::from_secs(3);
/// Round trips timed through a new proxy, for the note: the median is given.
const PROBES: usize = 21;

/// How one round-trip time's rows reach their server: directly at 0 ms, else through a
/// proxy of their own, started for them and stopped when the route is dropped.
pub(crate) struct Route {
    /// The round trip asked for, in milliseconds.
    rtt_ms: f64,
    /// Whether rows at 0 ms carry `rtt_ms` too: when the run measures another distance.
    tag_direct: bool,
    proxy: Option<DelayProxy>,
    /// A round trip through the proxy as measured when it started: (what, milliseconds).
    measured: Option<(&'static str, f64)>,
}

impl Route {
    /// A route to `server` (a PostgreSQL, MySQL or AMQP URL) at `rtt_ms`: for more than 0,
    /// a proxy in front of it, whose round trip is timed at once with the server's
    /// simplest request.
    pub(crate) async fn to(server: &str, rtt_ms: f64, tag_direct: bool) -> Result<Route> {
        let mut route = Route {
            rtt_ms,
            tag_direct,
            proxy: None,
            measured: None,
        };
        if rtt_ms <= 0.0 {
            return Ok(route);
        }
        let failed = |e: std::io::Error| {
            Error::broker_msg(format!(
                "a delay proxy in front of {}: {e}",
                hopper::redact_url(server)
            ))
        };
        let upstream = upstream_of(server).map_err(failed)?;
        let one_way = Duration::from_secs_f64(rtt_ms / 2000.0);
        let proxy = DelayProxy::start(upstream, one_way).map_err(failed)?;
        let url = proxy.url(server).map_err(failed)?;
        let (what, mut times) = if server.starts_with("amqp") {
            ("basic.qos", amqp_round_trips_ms(&url, PROBES).await?)
        } else {
            let probe = async {
                let mut conn = AdminConn::connect(&url).await?;
                let times = conn.round_trips_ms(PROBES).await;
                conn.close().await;
                times
            };
            let times = probe
                .await
                .map_err(|e| Error::broker("timing a round trip through the proxy", e))?;
            ("SELECT 1", times)
        };
        route.measured = Some((what, median(&mut times)));
        route.proxy = Some(proxy);
        Ok(route)
    }

    /// `url` as this route reaches it: through the proxy's port, or unchanged at 0 ms.
    pub(crate) fn url(&self, url: &str) -> Result<String> {
        match &self.proxy {
            None => Ok(url.to_owned()),
            Some(proxy) => proxy
                .url(url)
                .map_err(|e| Error::broker_msg(format!("{}: {e}", hopper::redact_url(url)))),
        }
    }

    /// A row's job count at this distance, before `--scale`: `base`, or fewer, so that a
    /// raw baseline moving `per_round_trip` jobs a round trip drains in about
    /// [`DRAIN_AT_RTT`].
    pub(crate) fn jobs(&self, base: usize, per_round_trip: f64) -> usize {
        if self.rtt_ms <= 0.0 {
            return base;
        }
        let fit = per_round_trip * DRAIN_AT_RTT.as_secs_f64() * 1000.0 / self.rtt_ms;
        base.min(fit as usize)
    }

    /// `row` as measured on this route: at a distance, its workload names the round trip
    /// (`… @ 5 ms RTT`) and its note the proxy and the round trip measured through it.
    pub(crate) fn label(&self, mut row: Row) -> Row {
        if self.rtt_ms > 0.0 || self.tag_direct {
            row.rtt_ms = Some(self.rtt_ms);
        }
        if self.rtt_ms > 0.0 {
            row.workload = format!("{} @ {} ms RTT", row.workload, self.rtt_ms);
            let measured = self.measured.map_or(String::new(), |(what, ms)| {
                format!(", {what} measured {ms:.2} ms")
            });
            row.note = format!(
                "{}; through a delay proxy, {} ms each way{measured}",
                row.note,
                self.rtt_ms / 2.0
            );
        }
        row
    }
}

/// Sets `vs_0ms` on each row measured at a distance: its Hopper rate over that of the
/// same workload at 0 ms in the same run, where there is one.
pub(crate) fn set_vs_0ms(rows: &mut [Row]) {
    let direct: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.rtt_ms == Some(0.0))
        .filter_map(|r| Some((r.workload.clone(), r.hopper_per_s?)))
        .collect();
    for row in rows
        .iter_mut()
        .filter(|r| r.rtt_ms.is_some_and(|ms| ms > 0.0))
    {
        let Some((workload, _)) = row.workload.rsplit_once(" @ ") else {
            continue;
        };
        let at_0 = direct.iter().find(|(w, _)| w == workload);
        if let (Some(rate), Some((_, rate_0))) = (row.hopper_per_s, at_0) {
            row.vs_0ms = Some(rate / rate_0);
        }
    }
}

/// A scratch schema or database on `server`, made and dropped directly, in which `work`
/// gets the scratch's URL as `route` reaches it.
pub(crate) async fn in_scratch<T>(
    server: &str,
    route: &Route,
    work: impl AsyncFnOnce(String) -> Result<T>,
) -> Result<T> {
    Scratch::run(server, async |s| work(route.url(&s.url)?).await).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(rtt_ms: f64, tag_direct: bool) -> Route {
        Route {
            rtt_ms,
            tag_direct,
            proxy: None,
            measured: Some(("SELECT 1", 5.21)),
        }
    }

    fn row(workload: &str, rate: f64) -> Row {
        Row {
            workload: workload.into(),
            hopper_per_s: Some(rate),
            note: "raw: broker fetch+settle loop".into(),
            ..Row::default()
        }
    }

    /// At 0 ms every count stays; further away a count shrinks to about 3 s of the raw
    /// baseline's round trips, never above the count at 0 ms.
    #[test]
    fn job_counts_shrink_with_the_distance() {
        assert_eq!(route(0.0, true).jobs(100_000, 5.0), 100_000);
        assert_eq!(route(5.0, true).jobs(100_000, 5.0), 3_000);
        assert_eq!(route(1.0, true).jobs(100_000, 5.0), 15_000);
        assert_eq!(route(1.0, true).jobs(100_000, 50.0), 100_000);
        assert_eq!(route(5.0, true).jobs(20_000, 1.0), 600);
        assert_eq!(route(1.0, true).jobs(50_000, 10.0 / 8.0), 3_750);
    }

    /// A row at a distance names it in its workload, its field and its note; one at 0 ms
    /// is left as it was, but for the field when the run measured a distance too.
    #[test]
    fn rows_name_their_round_trip() {
        let far = route(5.0, true).label(row("postgres drain, batch 10", 1.0));
        assert_eq!(far.workload, "postgres drain, batch 10 @ 5 ms RTT");
        assert_eq!(far.rtt_ms, Some(5.0));
        assert_eq!(
            far.note,
            "raw: broker fetch+settle loop; through a delay proxy, 2.5 ms each way, \
             SELECT 1 measured 5.21 ms"
        );
        let near = route(0.0, true).label(row("postgres drain, batch 10", 1.0));
        assert_eq!(near.workload, "postgres drain, batch 10");
        assert_eq!(near.rtt_ms, Some(0.0));
        assert_eq!(near.note, "raw: broker fetch+settle loop");
        let alone = route(0.0, false).label(row("postgres drain, batch 10", 1.0));
        assert_eq!(alone.rtt_ms, None);
        assert_eq!(
            route(0.5, true).label(row("w", 1.0)).workload,
            "w @ 0.5 ms RTT"
        );
    }

    /// Each row at a distance is set against the same workload at 0 ms; none where 0 ms
    /// was not run, and never a row at 0 ms or one of another workload.
    #[test]
    fn vs_0ms_is_against_the_same_workload_direct() {
        let (near, far, farther) = (route(0.0, true), route(1.0, true), route(5.0, true));
        let mut rows = vec![
            row("memory drain, c=8", 9.0),
            near.label(row("pg, batch 10", 200.0)),
            near.label(row("pg, batch 100", 1000.0)),
            far.label(row("pg, batch 10", 100.0)),
            farther.label(row("pg, batch 10", 20.0)),
            farther.label(row("pg, batch 100", 250.0)),
            farther.label(row("amqp consume, window 1", 5.0)),
        ];
        set_vs_0ms(&mut rows);
        let vs: Vec<Option<f64>> = rows.iter().map(|r| r.vs_0ms).collect();
        assert_eq!(
            vs,
            [None, None, None, Some(0.5), Some(0.1), Some(0.25), None]
        );
    }
}
