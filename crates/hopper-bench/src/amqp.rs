//! The RabbitMQ rows: a plain lapin consumer, acking each delivery and acking in groups,
//! beside `hopper load --prefilled`, each draining the same backlog.

use std::time::Instant;

use hopper::{Error, Result};

use crate::load::{fill, hopper_load_with};
use crate::measure::{context_switches, cpu_us_per, process_cpu_s, switches_per};
use crate::rounds::{
    median, median_row, paired_ratio, ratio_spread, raw_beside_hopper, round_ratios,
};
use crate::table::Row;

/// RabbitMQ at one window: raw lapin acking each, raw lapin with grouped acks, then
/// `hopper load --prefilled` at concurrency 50 with prefetch `window`, each draining the
/// same backlog of `jobs`, published the same way by Hopper's own (confirmed) enqueue just
/// before. The backlog must be the same: how a queue was just filled moves how fast the
/// server then delivers by half or more (on 1 December a raw consumer drained 20,000 at
/// 48–65k msgs/s right after `hopper load`'s own enqueue, and at 122k right after this
/// bench's fill as it was then, with payloads `[index, 0]`).
pub(crate) async fn amqp_row(url: &str, jobs: usize, window: u16, rounds: usize) -> Result<Row> {
    let queue = format!("hopper_bench_{}_{window}", std::process::id());
    let declared = with_declare(url);
    let admin = hopper::connect(&declared).await?;
    let window_arg = window.to_string();
    // Interleaved rounds, medians kept: the broker, the raw consumer and Hopper share two
    // cores, and one run of either moves by about a third from one run to the next.
    let (mut each, mut grouped, mut hopper) = (Vec::new(), Vec::new(), Vec::new());
    let (mut raw_cpu, mut raw_switches) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        for (rates, ack_grouped) in [(&mut each, false), (&mut grouped, true)] {
            fill(&admin, &queue, jobs).await?;
            let raw = raw_lapin(url, &queue, jobs, window, ack_grouped).await?;
            rates.push(raw.rate);
            if ack_grouped {
                raw_cpu.extend(raw.cpu_us);
                raw_switches.extend(raw.switches);
            }
        }
        fill(&admin, &queue, jobs).await?;
        let (row, _) = hopper_load_with(
            &declared,
            jobs,
            50,
            Some(hopper::worker::DEFAULT_MAX_BATCH),
            &format!("amqp consume, window {window}"),
            &["--prefetch", &window_arg, "--queues", &queue, "--prefilled"],
        )
        .await?;
        // On stderr as it goes (the table is stdout's): a long run shows its progress, and
        // each round's pair, which the table sums up as a median and a spread.
        eprintln!(
            "amqp window {window}, round {round}/{rounds}: raw {:.0}/s (acking each {:.0}/s), Hopper {:.0}/s",
            grouped[grouped.len() - 1],
            each[each.len() - 1],
            row.hopper_per_s.unwrap_or(0.0)
        );
        hopper.push(row);
    }
    let ratios = round_ratios(&hopper, &grouped);
    let spread = ratio_spread(&ratios);
    let (paired, paired_each) = (median(&mut ratios.clone()), paired_ratio(&hopper, &each));
    let hopper_cpu = hopper.iter().filter_map(|r| r.cpu_us_per_job).collect();
    let cpu = raw_beside_hopper("client CPU µs/msg", 1, raw_cpu, hopper_cpu);
    let hopper_switches = hopper.iter().filter_map(|r| r.switches_per_job).collect();
    let switches = raw_beside_hopper("context switches/msg", 2, raw_switches, hopper_switches);
    let mut row = median_row(hopper);
    let (each, grouped) = (median(&mut each), median(&mut grouped));
    row.raw_per_s = Some(grouped);
    row.note = format!(
        "medians of {rounds} interleaved rounds, ratios the median of each round's; \
         raw: lapin, grouped acks{spread}; acking each {each:.0}/s (Hopper/that {paired_each:.2}){cpu}{switches}"
    );
    row.ratio = Some(paired);
    drop(admin);
    let _ = delete_queue(url, &queue).await;
    Ok(row)
}

/// `url` asking Hopper to declare the queues it uses.
pub(crate) fn with_declare(url: &str) -> String {
    if url.contains("declare=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&declare=true")
    } else {
        format!("{url}?declare=true")
    }
}

/// What one raw lapin drain measured.
struct RawRun {
    /// Messages a second.
    rate: f64,
    /// This process's CPU time per message (µs), where the system reports it.
    cpu_us: Option<f64>,
    /// Context switches of this process's threads per message, where the system reports
    /// them.
    switches: Option<f64>,
}

/// A plain lapin consumer: `basic.qos(window)`, decode each payload as a handler would,
/// and ack it, each on its own or grouped with `multiple` once half the window waits.
/// The bench process does nothing else meanwhile, so its CPU time and context switches
/// while the consumer runs are the consumer's.
async fn raw_lapin(
    url: &str,
    queue: &str,
    jobs: usize,
    window: u16,
    grouped: bool,
) -> Result<RawRun> {
    use futures_util::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
    let amqp = |what: &'static str| move |e: lapin::Error| Error::broker(what, e);
    let (conn, ch) = open_channel(url).await?;
    ch.basic_qos(window, BasicQosOptions::default())
        .await
        .map_err(amqp("basic.qos"))?;
    let cpu_before = process_cpu_s();
    let switches_before = context_switches();
    let started = Instant::now();
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "hopper-bench-raw".into(),
            BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .map_err(amqp("basic.consume"))?;
    let group = if grouped { (window / 2).max(1) } else { 1 };
    let (mut n, mut waiting) = (0, 0u16);
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery.map_err(amqp("receiving"))?;
        let _: (usize, u64) = serde_json::from_slice(&delivery.data)
            .map_err(|e| Error::broker_msg(format!("a bench payload did not decode: {e}")))?;
        n += 1;
        waiting += 1;
        if waiting >= group || n == jobs {
            delivery
                .ack(BasicAckOptions { multiple: grouped })
                .await
                .map_err(amqp("basic.ack"))?;
            waiting = 0;
        }
        if n == jobs {
            break;
        }
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu_us = cpu_us_per(cpu_before, process_cpu_s(), n as u64);
    let switches = switches_per(switches_before, context_switches(), n as u64);
    let _ = conn.close(200, "done".into()).await;
    Ok(RawRun {
        rate,
        cpu_us,
        switches,
    })
}

/// `n` round trips of `basic.qos` on a channel of a connection of its own, each timed, in
/// milliseconds.
pub(crate) async fn round_trips_ms(url: &str, n: usize) -> Result<Vec<f64>> {
    use lapin::options::BasicQosOptions;
    let amqp = |what: &'static str| move |e: lapin::Error| Error::broker(what, e);
    let (conn, ch) = open_channel(url).await?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        ch.basic_qos(1, BasicQosOptions::default())
            .await
            .map_err(amqp("basic.qos"))?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(times)
}

/// Deletes `queue` and its dead-letter queue, `{queue}.dead`, on a connection of its own.
pub(crate) async fn delete_queue(url: &str, queue: &str) -> Result<()> {
    use lapin::options::QueueDeleteOptions;
    let (conn, ch) = open_channel(url).await?;
    for q in [queue.to_owned(), format!("{queue}.dead")] {
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}

/// A connection of its own to `url`, and a channel on it.
pub(crate) async fn open_channel(url: &str) -> Result<(lapin::Connection, lapin::Channel)> {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .map_err(|e| Error::broker("connecting to RabbitMQ", e))?;
    let ch = conn
        .create_channel()
        .await
        .map_err(|e| Error::broker("opening a channel", e))?;
    Ok((conn, ch))
}
