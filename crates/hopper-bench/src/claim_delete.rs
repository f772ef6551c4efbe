//! The PostgreSQL ceiling beside the wide drain row: what pgbench would measure with a
//! script of one statement, run by several clients at once. Each client deletes the next
//! `batch` pending jobs of Hopper's own table (`FOR UPDATE SKIP LOCKED`, the index a claim
//! uses) and reads them back, one transaction per batch, until the queue is empty. No
//! lease, no settlement, no worker: a claim and an ack folded into one commit. Through the
//! same driver as the broker (sqlx), so the client costs alike.

use std::time::Instant;

use hopper::{Error, Result};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Row};

use crate::load::fill;

/// Fills the queue with `jobs`, then drains it with `clients` connections, each deleting
/// `batch` at a time; returns jobs per second.
pub(crate) async fn raw_claim_delete(
    url: &str,
    jobs: usize,
    batch: usize,
    clients: usize,
) -> Result<f64> {
    hopper::migrate(url).await?;
    let broker = hopper::connect(url).await?;
    let queue = "raw";
    fill(&broker, queue, jobs).await?;
    drop(broker);
    let (options, schema) = driver_options(url)?;
    let statement = format!(
        "DELETE FROM {schema}.hopper_jobs WHERE id = ANY (ARRAY(
             SELECT id FROM {schema}.hopper_jobs
             WHERE state = 0 AND queue = $1
             ORDER BY priority DESC, run_at, id
             LIMIT $2
             FOR UPDATE SKIP LOCKED))
         RETURNING id, payload"
    );
    let failed = |e: sqlx::Error| Error::broker("the raw claim+delete loop", e);
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(options.connect().await.map_err(failed)?);
    }
    let started = Instant::now();
    let loops = conns.into_iter().map(|mut conn| {
        let statement = statement.clone();
        tokio::spawn(async move {
            let mut done = 0usize;
            loop {
                let rows = sqlx::query(&statement)
                    .bind(queue)
                    .bind(batch as i64)
                    .fetch_all(&mut conn)
                    .await?;
                if rows.is_empty() {
                    break;
                }
                for row in &rows {
                    std::hint::black_box(row.try_get::<&[u8], _>(1)?);
                }
                done += rows.len();
            }
            let _ = conn.close().await;
            Ok::<usize, sqlx::Error>(done)
        })
    });
    let mut done = 0;
    for task in loops.collect::<Vec<_>>() {
        done += task
            .await
            .map_err(|e| Error::broker_msg(format!("a raw client stopped: {e}")))?
            .map_err(failed)?;
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    if done < jobs {
        return Err(Error::broker_msg(format!(
            "the raw claim+delete loop drained {done} of {jobs} jobs"
        )));
    }
    Ok(rate)
}

/// The driver's options and the schema from a broker URL, whose `?schema=` is Hopper's
/// own and unknown to the driver.
fn driver_options(url: &str) -> Result<(PgConnectOptions, String)> {
    let bad =
        |e: &dyn std::fmt::Display| Error::broker_msg(format!("{}: {e}", hopper::redact_url(url)));
    let mut parsed = url::Url::parse(url).map_err(|e| bad(&e))?;
    let schema = parsed
        .query_pairs()
        .find(|(k, _)| k == "schema")
        .map_or_else(|| "hopper".to_owned(), |(_, v)| v.into_owned());
    // Spliced into the statement: only the alphabet Hopper allows in a schema name.
    if !schema
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(bad(&format!("schema {schema:?} is not a-z 0-9 _")));
    }
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| k != "schema")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    parsed.set_query(None);
    if !kept.is_empty() {
        parsed.query_pairs_mut().extend_pairs(kept);
    }
    let options = parsed.as_str().parse().map_err(|e| bad(&e))?;
    Ok((options, schema))
}
