//! The RabbitMQ enqueue row: Hopper's enqueue, confirmed, beside lapin publishing the same
//! messages without confirms, the fastest a client can hand messages to the server; and
//! in the note lapin with confirms, awaited every [`ENQUEUE_CHUNK`] as Hopper's are.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::try_join_all;
use hopper::{Broker, Error, NewJob, Result};
use lapin::BasicProperties;
use lapin::options::{
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, QueuePurgeOptions,
};

use crate::load::{ENQUEUE_CHUNK, micros_now};
use crate::rounds::{median, ratio_spread};
use crate::table::Row;

/// `rounds` interleaved rounds of `jobs` messages each way, the queue purged before each
/// run: the raw publisher, then Hopper's `enqueue` in calls of [`ENQUEUE_CHUNK`], one at
/// a time, as a program loading a backlog would.
pub(crate) async fn amqp_enqueue_row(url: &str, jobs: usize, rounds: usize) -> Result<Row> {
    let queue = format!("hopper_bench_enqueue_{}", std::process::id());
    let declared = crate::amqp::with_declare(url);
    let broker = hopper::connect(&declared).await?;
    // Declares the queue, which the raw publisher needs: the server drops a message
    // routed to no queue, and dropping costs less than storing.
    broker.enqueue(vec![NewJob::json(&queue, &0)?]).await?;
    broker.purge(&queue).await?;
    let (mut raw, mut hopper, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut confirmed = Vec::new();
    for round in 1..=rounds {
        let r = raw_publish(url, &queue, jobs, false).await?;
        broker.purge(&queue).await?;
        confirmed.push(raw_publish(url, &queue, jobs, true).await?);
        broker.purge(&queue).await?;
        let h = hopper_enqueue(&broker, &queue, jobs).await?;
        broker.purge(&queue).await?;
        eprintln!("amqp enqueue, round {round}/{rounds}: raw {r:.0}/s, Hopper {h:.0}/s");
        ratios.push(h / r);
        raw.push(r);
        hopper.push(h);
    }
    let spread = ratio_spread(&ratios);
    let confirmed = median(&mut confirmed);
    let _ = crate::amqp::delete_queue(url, &queue).await;
    Ok(Row {
        workload: "amqp enqueue, confirmed".into(),
        jobs,
        raw_per_s: Some(median(&mut raw)),
        hopper_per_s: Some(median(&mut hopper)),
        ratio: Some(median(&mut ratios)),
        note: format!(
            "medians of {rounds} interleaved rounds; Hopper: enqueue calls of {ENQUEUE_CHUNK}, \
             persistent, publisher confirms; raw: lapin publishing the same messages, \
             persistent, no confirms{spread}; lapin with confirms awaited each {ENQUEUE_CHUNK} \
             {confirmed:.0}/s"
        ),
        ..Row::default()
    })
}

async fn hopper_enqueue(broker: &Arc<dyn Broker>, queue: &str, jobs: usize) -> Result<f64> {
    let started = Instant::now();
    for start in (0..jobs).step_by(ENQUEUE_CHUNK) {
        let chunk = (start..jobs.min(start + ENQUEUE_CHUNK))
            .map(|i| NewJob::json(queue, &(i, micros_now())))
            .collect::<Result<Vec<_>>>()?;
        broker.enqueue(chunk).await?;
    }
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

/// Publishes `jobs` persistent messages to `queue` through the default exchange in groups
/// of [`ENQUEUE_CHUNK`] whose frames are all handed to the connection before the next;
/// with `confirms`, each group's confirms are awaited before the next group. The time ends
/// with a round trip on the same channel, which the server answers after the publishes
/// before it.
async fn raw_publish(url: &str, queue: &str, jobs: usize, confirms: bool) -> Result<f64> {
    let amqp = |what: &'static str| move |e: lapin::Error| Error::broker(what, e);
    let (conn, ch) = crate::amqp::open_channel(url).await?;
    if confirms {
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(amqp("confirm.select"))?;
    }
    let properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("application/json".into());
    let started = Instant::now();
    for start in (0..jobs).step_by(ENQUEUE_CHUNK) {
        let payloads = (start..jobs.min(start + ENQUEUE_CHUNK))
            .map(|i| serde_json::to_vec(&(i, micros_now())))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Encode(e.to_string()))?;
        let sends = payloads.iter().map(|p| {
            ch.basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                p,
                properties.clone(),
            )
        });
        let pending = try_join_all(sends).await.map_err(amqp("publishing"))?;
        if confirms {
            try_join_all(pending)
                .await
                .map_err(amqp("awaiting confirms"))?;
        }
    }
    ch.basic_qos(1, BasicQosOptions::default())
        .await
        .map_err(amqp("basic.qos"))?;
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    let _ = ch
        .queue_purge(queue.into(), QueuePurgeOptions::default())
        .await;
    let _ = conn.close(200, "done".into()).await;
    Ok(rate)
}
