//! Where the worker's metrics go: a Prometheus page served over HTTP (`hopper work
//! --metrics ADDR`), or a recorder that only keeps them (`hopper load --instrument`, to
//! measure what recording costs).

use std::net::SocketAddr;

use hopper::{ConfigError, Result};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Buckets of the time histograms, in seconds: from a millisecond to five minutes.
const SECONDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Buckets of fetch sizes: powers of two, as the adaptive window grows.
const SIZES: [f64; 11] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// Histograms as Prometheus histograms (buckets, which add up across workers), not the
/// exporter's default summaries.
fn builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full("hopper_fetch_size".into()), &SIZES))
        .expect("the bucket lists are not empty")
}

/// Serves every metric at `http://ADDR/metrics` (any path answers) as Prometheus text.
/// Call before starting workers: they register their metrics when they start.
pub fn serve(addr: SocketAddr) -> Result<()> {
    builder().with_http_listener(addr).install().map_err(|e| {
        ConfigError::new(
            "--metrics",
            addr,
            format!("an address to serve metrics on ({e})"),
        )
        .into()
    })
}

/// Records every metric in this process without serving it.
pub fn record() -> Result<PrometheusHandle> {
    builder()
        .install_recorder()
        .map_err(|e| hopper::Error::broker_msg(format!("installing the metrics recorder: {e}")))
}
