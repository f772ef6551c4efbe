//! Rate limits on PostgreSQL, beyond the shared suite: claimers of two processes sharing
//! one window, the reaper's second claim, windows another program wrote wrong, the
//! migration that brings the table, and what a claim of an unlimited queue pays for it.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::{Broker, FetchRequest, JobId, NewJob, RateLimit};
use hopper_postgres::{PgBroker, PgOptions};
use hopper_testkit::helpers::{claim_concurrently, enqueue_n};
use sqlx::{Connection, PgConnection};

use super::plans::{DropSchema, explain, filled, rendered};
use super::support::{broker_with, schema_at, url};

const TTL: Duration = Duration::from_secs(60);

fn limit(max: u32, per: Duration) -> RateLimit {
    RateLimit::new(max, per).expect("a valid limit")
}

/// Queue `q`'s stored window: its start times and how many jobs each took.
async fn window(schema: &str) -> (Vec<i64>, Vec<i32>) {
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    let row = sqlx::query_as(&format!(
        "SELECT start_at, start_n FROM {schema}.hopper_rate_limits WHERE queue = 'q'"
    ))
    .fetch_one(&mut raw)
    .await
    .unwrap();
    raw.close().await.unwrap();
    row
}

/// Runs `sql` on a connection of its own, as another program would.
async fn raw(sql: &str) {
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    sqlx::raw_sql(sql).execute(&mut raw).await.unwrap();
    raw.close().await.unwrap();
}

/// Two brokers on one schema, as two processes would have (a pool each), with 8 claimers
/// between them fetching batches of 7 from 300 jobs under 40 an hour: 40 are claimed, and
/// the stored window holds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claimers_of_two_processes_share_one_window() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let options = PgOptions::default().schema(pg.schema()).listen(false);
    let process = PgBroker::connect_with(&url(), options).await.unwrap();
    let other: Arc<dyn Broker> = Arc::new(process.clone());
    pg.set_rate_limit("q", Some(limit(40, Duration::from_secs(3600))))
        .await
        .unwrap();
    enqueue_n(&broker, "q", 300).await;
    let seen = claim_concurrently(&[broker.clone(), other.clone()], "q", 8, 7).await;
    assert_eq!(seen.len(), 40, "claimed under a limit of 40 an hour");
    assert_eq!(broker.counts("q").await.unwrap().pending, 260);
    let (at, n) = window(pg.schema()).await;
    assert_eq!(
        n.iter().sum::<i32>(),
        40,
        "every start recorded: {at:?} {n:?}"
    );
    assert!(at.is_sorted(), "{at:?}");
    // The other process's limit is the same row: lifting it there frees the queue here.
    other.set_rate_limit("q", None).await.unwrap();
    let rest = broker
        .fetch(FetchRequest::one("q", 300, TTL))
        .await
        .unwrap();
    assert_eq!(rest.jobs.len(), 260);
    process.close().await;
}

/// Jobs the reaper returns are claimed by a second claim in the same fetch, which keeps
/// the window too: a queue limited to 3 an hour gives out its 3 jobs again only after the
/// limit is lifted, however many leases expire.
#[tokio::test]
async fn the_reapers_second_claim_keeps_the_window() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let hour = Duration::from_secs(3600);
    pg.set_rate_limit("q", Some(limit(3, hour))).await.unwrap();
    enqueue_n(&broker, "q", 6).await;
    let short = FetchRequest::one("q", 10, Duration::from_millis(1));
    let first = broker.fetch(short).await.unwrap();
    assert_eq!(first.jobs.len(), 3);
    // Past the reaper's pace (a second), so the next fetch reaps the expired leases.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(again.jobs.len(), 0, "the window is full");
    let counts = broker.counts("q").await.unwrap();
    assert_eq!((counts.pending, counts.leased), (6, 0), "the 3 were reaped");
    pg.set_rate_limit("q", None).await.unwrap();
    let lifted = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(lifted.jobs.len(), 6);
}

/// Claims of one job each, 300 of them within a window of an hour, share the pairs of
/// their slot (1/256 of the window): the stored window stays small however many claims
/// fill it, and still counts every start.
#[tokio::test]
async fn small_claims_share_their_slot_of_the_window() {
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    pg.set_rate_limit("q", Some(limit(1000, Duration::from_secs(3600))))
        .await
        .unwrap();
    enqueue_n(&broker, "q", 300).await;
    for _ in 0..300 {
        let one = broker.fetch(FetchRequest::one("q", 1, TTL)).await.unwrap();
        assert_eq!(one.jobs.len(), 1);
    }
    let (at, n) = window(pg.schema()).await;
    assert!(at.len() <= 2, "{at:?}");
    assert_eq!(n.iter().sum::<i32>(), 300);
}

/// Events logged while a test runs on this thread: level, message and fields.
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<String>>>);

impl Logged {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl tracing::Subscriber for Logged {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = event.metadata().level().to_string();
        event.record(&mut |field: &tracing::field::Field, value: &dyn Debug| {
            line.push_str(&format!(" {}={value:?}", field.name()));
        });
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A window another program wrote wrong never fails a claim nor stops a queue: the claim
/// logs it, naming the queue and what is wrong, counts the window afresh, stores a good
/// one, and serves the other queues of the fetch as usual.
#[tokio::test]
async fn a_window_stored_wrong_is_logged_and_counted_afresh() {
    let logged = Logged::default();
    let _log = tracing::subscriber::set_default(logged.clone());
    let (broker, pg) = broker_with(|o| o.listen(false)).await;
    let schema = pg.schema().to_owned();
    pg.set_rate_limit("q", Some(limit(3, Duration::from_secs(3600))))
        .await
        .unwrap();
    enqueue_n(&broker, "q", 40).await;
    enqueue_n(&broker, "r", 40).await;
    let both = FetchRequest {
        budgets: vec![
            hopper_core::Budget {
                queue: "q".into(),
                limit: 10,
            },
            hopper_core::Budget {
                queue: "r".into(),
                limit: 2,
            },
        ],
        lease_ttl: TTL,
    };
    let now = format!("ARRAY[{schema}.hopper_now_ms()]");
    let wrong = [
        ("'{1,2}'", "'{3}'", "2 start times for 1 counts"),
        (&now, "'{NULL}'", "missing or out of range"),
        (&now, "'{-5}'", "missing or out of range"),
        ("'{9000000000000000}'", "'{1}'", "later than now"),
    ];
    for (at, n, why) in wrong {
        raw(&format!(
            "UPDATE {schema}.hopper_rate_limits SET start_at = {at}, start_n = {n}"
        ))
        .await;
        let fetched = broker.fetch(both.clone()).await.unwrap();
        let of = |q: &str| fetched.jobs.iter().filter(|j| j.queue == q).count();
        assert_eq!(
            (of("q"), of("r")),
            (3, 2),
            "{why}: a fresh window, and r as usual"
        );
        let logs = logged.lines();
        let line = logs.last().cloned().unwrap_or_default();
        assert!(
            line.starts_with("ERROR") && line.contains("queue=\"q\"") && line.contains(why),
            "{why}: {logs:?}"
        );
        let (at, n) = window(&schema).await;
        assert_eq!((at.len(), n), (1, vec![3]), "{why}: stored afresh");
    }
    let errors = |logs: &[String]| logs.iter().filter(|l| l.starts_with("ERROR")).count();
    assert_eq!(errors(&logged.lines()), wrong.len(), "once each, not again");
    let full = broker.fetch(both.clone()).await.unwrap();
    assert_eq!(full.jobs.len(), 2, "the repaired window is full");

    // Starts out of order are put in order, with no complaint: 2 in the window.
    raw(&format!(
        "UPDATE {schema}.hopper_rate_limits
         SET start_at = ARRAY[{schema}.hopper_now_ms(), {schema}.hopper_now_ms() - 10],
             start_n = '{{1, 1}}'"
    ))
    .await;
    let fetched = broker.fetch(both.clone()).await.unwrap();
    assert_eq!(fetched.jobs.iter().filter(|j| j.queue == "q").count(), 1);
    let (at, n) = window(&schema).await;
    assert!(at.is_sorted() && n.iter().sum::<i32>() == 3, "{at:?} {n:?}");
    assert_eq!(errors(&logged.lines()), wrong.len(), "no complaint");

    // A limit out of range (the table's checks dropped) is read as the nearest in range,
    // and shown as none; the claim and the statistics go on.
    raw(&format!(
        "ALTER TABLE {schema}.hopper_rate_limits DROP CONSTRAINT hopper_rate_limits_max;
         UPDATE {schema}.hopper_rate_limits SET max = 0, start_at = '{{}}', start_n = '{{}}'"
    ))
    .await;
    let fetched = broker.fetch(both.clone()).await.unwrap();
    assert_eq!(fetched.jobs.iter().filter(|j| j.queue == "q").count(), 1);
    let line = logged.lines().last().cloned().unwrap_or_default();
    assert!(line.contains("0 per 3600000 ms: read as 1 per"), "{line}");
    let stats = broker.queue_stats("q").await.unwrap();
    assert_eq!(stats.rate_limit, None);
    let logs = logged.lines();
    let warned = logs
        .iter()
        .any(|l| l.starts_with("WARN") && l.contains("queue=\"q\"") && l.contains("max=0"));
    assert!(warned, "{logs:?}");
}

/// A schema at version 10, as the release before rate limits left it, with a job stored
/// then: `migrate` adds the table, the old job is claimed under a limit set after, and the
/// limit holds, through a purge too.
#[tokio::test]
async fn a_schema_from_before_rate_limits_keeps_its_jobs_and_limits_them() {
    let options = schema_at(10).await;
    let name = options.schema.clone();
    let _cleanup = DropSchema(name.clone());
    let mut raw = PgConnection::connect(&url()).await.unwrap();
    let old = super::support::insert_old_job(&mut raw, &name).await;
    let applied = hopper_postgres::migrate_with(&url(), &options)
        .await
        .unwrap();
    assert_eq!(
        applied, 7,
        "rate limits, groups, unblocked heads, rate keys, beside lines, sets, step aside"
    );
    let refused = sqlx::raw_sql(&format!(
        "INSERT INTO {name}.hopper_rate_limits (queue, max, per_ms) VALUES ('x', 0, 1)"
    ))
    .execute(&mut raw)
    .await;
    let message = refused.unwrap_err().to_string();
    assert!(message.contains("hopper_rate_limits_max"), "{message}");
    raw.close().await.unwrap();

    let broker = PgBroker::connect_with(&url(), options.listen(false))
        .await
        .unwrap();
    assert!(broker.capabilities().rate_limits);
    broker
        .set_rate_limit("q", Some(limit(2, Duration::from_secs(3600))))
        .await
        .unwrap();
    let new = (0..3).map(|i| NewJob::json("q", &i).unwrap()).collect();
    broker.enqueue(new).await.unwrap();
    let held = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    let got: Vec<JobId> = held.jobs.iter().map(|j| j.id).collect();
    assert_eq!(got.len(), 2, "the limit holds");
    assert_eq!(got[0], JobId(old), "the old job first");
    assert!(
        held.next_due.is_some(),
        "due again when the window has room"
    );
    assert_eq!(
        broker.queue_stats("q").await.unwrap().rate_limit,
        Some(limit(2, Duration::from_secs(3600)))
    );
    // A purge takes the jobs and leaves the limit, and its window: still full.
    assert_eq!(broker.purge("q").await.unwrap(), 4);
    assert_eq!(broker.queues().await.unwrap(), ["q"]);
    assert!(broker.queue_stats("q").await.unwrap().rate_limit.is_some());
    broker
        .enqueue(vec![NewJob::json("q", &9).unwrap()])
        .await
        .unwrap();
    let full = broker.fetch(FetchRequest::one("q", 10, TTL)).await.unwrap();
    assert_eq!(full.jobs.len(), 0);
    broker.close().await;
}

/// A claim of a queue without a limit, beside 200 limited queues, reads the table of
/// limits by its key, once, and nothing more: neither function that keeps the windows
/// runs.
#[tokio::test]
async fn an_unlimited_claim_probes_the_limits_by_key_only() {
    let (schema, _cleanup, mut conn) = filled(&[("0", "0", 2_000)]).await;
    for statement in [
        format!(
            "INSERT INTO {schema}.hopper_rate_limits (queue, max, per_ms, start_at, start_n)
             SELECT 'l' || i, 10, 1000, '{{1,2,3}}', '{{1,1,1}}' FROM generate_series(1, 200) i"
        ),
        format!("VACUUM (ANALYZE) {schema}.hopper_rate_limits"),
    ] {
        sqlx::raw_sql(&statement).execute(&mut conn).await.unwrap();
    }
    let claim = rendered(include_str!("../../sql/claim.sql"), &schema);
    let plan = explain(
        &mut conn,
        "claim",
        &claim,
        "'{q}', '{100}', NULL, 8, 60000, false, 100, 20, NULL",
    )
    .await;
    assert!(!plan.contains("Seq Scan"), "{plan}");
    let probes: Vec<&str> = plan
        .lines()
        .filter(|l| l.contains("on hopper_rate_limits"))
        .collect();
    assert_eq!(probes.len(), 1, "one read of the limits:\n{plan}");
    assert!(
        probes[0].contains("using hopper_rate_limits_pkey") && probes[0].contains("rows=0"),
        "by key:\n{plan}"
    );
    for function in ["hopper_rate_take", "hopper_rate_record"] {
        let scan = plan
            .lines()
            .find(|l| l.contains(&format!("Function Scan on {function}")))
            .unwrap_or_else(|| panic!("no call of {function} in:\n{plan}"));
        assert!(scan.contains("never executed"), "{function} ran:\n{plan}");
    }
    assert_eq!(
        sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM {schema}.hopper_jobs WHERE lease_id = 8"
        ))
        .fetch_one(&mut conn)
        .await
        .unwrap(),
        100
    );
    conn.close().await.unwrap();
}
