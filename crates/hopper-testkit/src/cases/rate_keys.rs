//! Rate limits per key ([`RateLimit::per_key`]): each rate key of a queue's jobs has its
//! own window, and jobs without a key share one.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Broker, Error, JobId, NewJob, RateLimit};
use tokio::time::advance;

use super::record;
use crate::helpers::{TTL, fetch, rate_keyed as job, skip};

fn per_key(max: u32, per_ms: u64) -> RateLimit {
    RateLimit::new(max, Duration::from_millis(per_ms))
        .expect("a valid limit")
        .per_key()
}

/// Under 2 per 100 ms per key, a fetch of 20 from 6 jobs of key `a`, 3 of `b` and 2
/// without a key takes 2 of each. The jobs held back move to the times their keys' windows
/// have room for them, two per period (`a`'s third and fourth at the next room, its fifth
/// and sixth a period later), and come due then, in that order. A broker without
/// [`Capabilities::rate_limits_per_key`](hopper_core::Capabilities::rate_limits_per_key)
/// refuses both the limit and the keys, by name.
pub async fn rate_limits_per_key(broker: Arc<dyn Broker>) {
    if !broker.capabilities().rate_limits_per_key {
        let limit = broker.set_rate_limit("q", Some(per_key(2, 100))).await;
        assert!(
            matches!(&limit, Err(Error::NotSupported { what, .. }) if what.contains("rate limits")),
            "a limit per key must be refused by name: {limit:?}"
        );
        let keyed = broker.enqueue(vec![job("a1", "a")]).await;
        assert!(
            matches!(&keyed, Err(Error::NotSupported { what, .. }) if what.contains("rate key")),
            "a job with a rate key must be refused by name: {keyed:?}"
        );
        skip(
            "rate_limits_per_key",
            "needs Capabilities::rate_limits_per_key (checked: refused by name)",
        );
        return;
    }
    broker
        .set_rate_limit("q", Some(per_key(2, 100)))
        .await
        .unwrap();
    let names = [
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
        ("a3", "a"),
        ("n1", ""),
        ("a4", "a"),
        ("b2", "b"),
        ("n2", ""),
        ("a5", "a"),
        ("b3", "b"),
        ("a6", "a"),
    ];
    let ids = broker
        .enqueue(names.iter().map(|(n, k)| job(n, k)).collect())
        .await
        .unwrap();
    let name_of = |id: JobId| names[ids.iter().position(|i| *i == id).unwrap()].0;
    let named = |jobs: &[hopper_core::Job]| {
        let mut got: Vec<&str> = jobs.iter().map(|j| name_of(j.id)).collect();
        got.sort();
        got
    };

    let id_of = |name: &str| ids[names.iter().position(|(n, _)| *n == name).unwrap()];
    let keys = [
        record(&broker, id_of("b2")).await.rate_key,
        record(&broker, id_of("n2")).await.rate_key,
    ];
    assert_eq!(keys, [Some("b".to_owned()), None], "records show rate keys");
    let first = fetch(&broker, "q", 20, TTL).await;
    assert_eq!(named(&first.jobs), ["a1", "a2", "b1", "b2", "n1", "n2"]);
    let t0 = record(&broker, first.jobs[0].id)
        .await
        .started_at
        .expect("a claimed job's start");
    assert_eq!(
        first.next_due,
        Some(t0 + 100),
        "the held-back jobs' first room"
    );
    let mut moved = Vec::new();
    for name in ["a3", "a4", "b3", "a5", "a6"] {
        moved.push(record(&broker, id_of(name)).await.job.run_at - t0);
    }
    assert_eq!(
        moved,
        [100, 100, 100, 200, 200],
        "a3, a4 and b3 at their keys' next room; a5 and a6 a period later"
    );

    advance(Duration::from_millis(99)).await;
    let early = fetch(&broker, "q", 20, TTL).await;
    assert!(early.jobs.is_empty(), "1 ms before any key has room");
    assert_eq!(early.next_due, Some(t0 + 100));
    advance(Duration::from_millis(1)).await;
    let second = fetch(&broker, "q", 20, TTL).await;
    assert_eq!(named(&second.jobs), ["a3", "a4", "b3"]);
    assert_eq!(second.next_due, Some(t0 + 200));
    advance(Duration::from_millis(100)).await;
    let third = fetch(&broker, "q", 20, TTL).await;
    assert_eq!(named(&third.jobs), ["a5", "a6"]);

    if broker.capabilities().admin.stats {
        let shown = broker.queue_stats("q").await.unwrap().rate_limit;
        assert_eq!(shown, Some(per_key(2, 100)), "shown to operators");
        assert_eq!(shown.unwrap().to_string(), "2/100ms per key");
    }

    // Lifted: a key's jobs go as fast as they are fetched again.
    broker.set_rate_limit("q", None).await.unwrap();
    let more: Vec<NewJob> = (0..5).map(|i| job(&format!("c{i}"), "a")).collect();
    broker.enqueue(more).await.unwrap();
    assert_eq!(fetch(&broker, "q", 20, TTL).await.jobs.len(), 5, "lifted");
    let bad = broker.enqueue(vec![job("e", "").rate_key("")]).await;
    assert!(
        matches!(&bad, Err(Error::Config(c)) if c.setting == "rate_key"),
        "an empty rate key is refused by name: {bad:?}"
    );
}

/// 50 jobs of key `a` come before 5 of `b`, under 2 an hour per key. One fetch of 10 reads
/// past `a`'s backlog and takes `a`'s first 2 and `b`'s first 2; `a`'s other 48 and `b`'s
/// other 3 move an hour on for each 2 of them, in claim order, whatever reads the broker
/// made to get there (PostgreSQL and MySQL read twice).
pub async fn rate_limits_per_key_read_past_a_backlog(broker: Arc<dyn Broker>) {
    let hour = Duration::from_secs(3600);
    if !limit_per_key(&broker, "rate_limits_per_key_read_past_a_backlog", 2, hour).await {
        return;
    }
    let mut jobs: Vec<NewJob> = (0..50).map(|i| job(&format!("a{i}"), "a")).collect();
    jobs.extend((0..5).map(|i| job(&format!("b{i}"), "b")));
    let ids = broker.enqueue(jobs).await.unwrap();
    let got = fetch(&broker, "q", 10, TTL).await;
    let mut taken: Vec<JobId> = got.jobs.iter().map(|j| j.id).collect();
    taken.sort();
    assert_eq!(taken, [ids[0], ids[1], ids[50], ids[51]]);
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.scheduled), (0, 51));
    let start = record(&broker, ids[0]).await.started_at.unwrap();
    let hour = hour.as_millis() as i64;
    let mut offsets = Vec::new();
    for &id in [&ids[2..6], &ids[10..12], &ids[48..50], &ids[52..55]]
        .concat()
        .iter()
    {
        offsets.push((record(&broker, id).await.job.run_at - start) / hour);
    }
    assert_eq!(offsets, [1, 1, 2, 2, 5, 5, 24, 24, 1, 1, 2]);
    // The first room of either key: a broker may record a start at the end of a short
    // slot of its window (PostgreSQL: 1/256 of the period), which is that much later.
    let due = got.next_due.expect("the held-back jobs' first room") - start;
    assert!((hour..=hour + hour / 256).contains(&due), "{due} ms");
}

/// Each claim spreads the jobs it holds back from their key's next room, whatever an
/// earlier claim booked: under 1 an hour per key, a first fetch takes `x0` and `a1` and
/// moves `a2` and `a3` to 1 h and 2 h. Half an hour on, a fetch of 1 finds `y` (key `x`,
/// first in priority) full and reads on to `b` (key `a`, full too): `b` goes to `a`'s next
/// room, 1 h after `a1` started, not behind the 2 h the first claim booked.
pub async fn rate_limits_per_key_spread_afresh_each_claim(broker: Arc<dyn Broker>) {
    let hour = Duration::from_secs(3600);
    if !limit_per_key(
        &broker,
        "rate_limits_per_key_spread_afresh_each_claim",
        1,
        hour,
    )
    .await
    {
        return;
    }
    let first = vec![
        job("x0", "x"),
        job("a1", "a"),
        job("a2", "a"),
        job("a3", "a"),
    ];
    let ids = broker.enqueue(first).await.unwrap();
    let got = fetch(&broker, "q", 10, TTL).await;
    assert_eq!(got.jobs.len(), 2, "x0 and a1");
    let t0 = record(&broker, ids[1]).await.started_at.unwrap();
    advance(hour / 2).await;
    let later = vec![job("y", "x").priority(9), job("b", "a").priority(5)];
    let later = broker.enqueue(later).await.unwrap();
    let got = fetch(&broker, "q", 1, TTL).await;
    assert!(got.jobs.is_empty(), "both keys are full");
    let hour = hour.as_millis() as i64;
    let mut at = Vec::new();
    for id in [ids[2], ids[3], later[0], later[1]] {
        at.push((record(&broker, id).await.job.run_at - t0) / (hour / 4));
    }
    assert_eq!(
        at,
        [4, 8, 4, 4],
        "a2, a3, y and b in quarter hours after a1 started"
    );
}

/// Limits queue `q` to `max` jobs per `per` for each rate key; on a broker without limits
/// per key, skips `case` and says false.
async fn limit_per_key(broker: &Arc<dyn Broker>, case: &str, max: u32, per: Duration) -> bool {
    if !broker.capabilities().rate_limits_per_key {
        skip(case, "needs Capabilities::rate_limits_per_key");
        return false;
    }
    let limit = RateLimit::new(max, per).unwrap().per_key();
    broker.set_rate_limit("q", Some(limit)).await.unwrap();
    true
}
