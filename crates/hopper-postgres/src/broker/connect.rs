//! Connecting: the broker's three sets of connections, each with its session settings,
//! the schema version check, the wake-up listener; and closing.

use std::sync::Arc;

use hopper_core::Result;
use hopper_core::clock::Pace;
use tokio::sync::watch;

use super::maintenance::{KeyPrune, VacuumPace};
use super::{Inner, PRUNE_EVERY_MS, PgBroker, REAP_EVERY_MS, db_err};
use crate::conn::Connections;
use crate::migrate::{check_version, version};
use crate::options::PgOptions;
use crate::sql::Sql;
use crate::url::BrokerUrl;

/// Claim connections per broker: as many as fetches a worker keeps in flight to cover the
/// round trip. Opened only as claims overlap (see `Connections::get`).
const CLAIM_CONNECTIONS: usize = hopper_core::worker::MAX_FETCHES_IN_FLIGHT;

/// How the broker's connections plan: each statement once per connection (a custom plan
/// per execution cost 0.6–2 ms of server time, as much as running a claim of 100), and
/// never by a sequential scan, which leaves only the index paths every statement is
/// written for. A plan made while the table was nearly empty must stay right when it holds
/// millions: a queue table swings between the two faster than statistics follow.
///
/// And no JIT compilation: a sequential scan the planner cannot avoid (the workers' and
/// paused queues' tables of a few rows, read by a volatile clock no index can serve) is
/// costed at the disabled-path penalty, far above `jit_above_cost`, and PostgreSQL then
/// spent 20–90 ms compiling a scan of four pages: `workers` took 55–90 ms where it takes
/// 0.1 ms. No statement here runs long enough for JIT to pay.
const PLANNING: [(&str, &str); 3] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
    ("jit", "off"),
];

impl PgBroker {
    /// Connects with default options and the schema named by the URL's `?schema=`
    /// (default `hopper`). Refuses a schema whose
    /// migrations are behind this build.
    pub async fn connect(url: &str) -> Result<PgBroker> {
        let parsed = BrokerUrl::parse(url)?;
        let mut options = PgOptions::default();
        if let Some(schema) = parsed.schema.clone() {
            options.schema = schema;
        }

        Self::connect_with(url, options).await
    }

    /// Connects with `options`; a `?schema=` in the URL is ignored in favour of
    /// `options.schema`, and a `max_payload=` in the URL overrides `options.max_payload`.
    pub async fn connect_with(url: &str, mut options: PgOptions) -> Result<PgBroker> {
        let parsed = BrokerUrl::parse(url)?;
        if let Some(bytes) = parsed.max_payload {
            options.max_payload = bytes;
        }
        options.validate()?;
        // The server's own limit on every statement of the broker's connections (not the
        // vacuum's, which keeps its own).
        let limited = match options.statement_timeout {
            Some(t) => parsed
                .options
                .clone()
                .options([("statement_timeout", format!("{}ms", t.as_millis()))]),
            None => parsed.options.clone(),
        };
        let conns = Connections::new(
            limited.clone().options(PLANNING),
            parsed.shown.clone(),
            parsed.connect_timeout,
            options.connections,
        );
        let claims = Connections::new(
            limited
                .options(PLANNING)
                .options([("synchronous_commit", "off")]),
            parsed.shown.clone(),
            parsed.connect_timeout,
            CLAIM_CONNECTIONS,
        );
        {
            let mut held = conns.get().await?;
            let found = version(held.conn(), &options.schema)
                .await
                .map_err(db_err("reading the schema version"))?;
            check_version(found, &options.schema, &parsed.shown)?;
        }
        // Warnings stay on the server: one is sent whenever another broker's vacuum holds
        // the table and this one skips it, which is the point of SKIP_LOCKED.
        let vacuum = Connections::new(
            parsed
                .options
                .clone()
                .options([("client_min_messages", "error")]),
            parsed.shown.clone(),
            parsed.connect_timeout,
            1,
        );
        let channel = format!("hopper.{}", options.schema);
        let wake = watch::channel(0).0;
        let listener = options.listen.then(|| {
            crate::listen::spawn(
                parsed.options.clone(),
                channel.clone(),
                wake.clone(),
                parsed.shown.clone(),
            )
        });
        Ok(PgBroker {
            inner: Arc::new(Inner {
                conns,
                claims,
                vacuum,
                vacuum_pace: VacuumPace::default(),
                sql: Sql::for_schema(&options.schema),
                channel,
                wake,
                listener,
                reap_pace: Pace::new(REAP_EVERY_MS),
                prune_pace: Pace::new(PRUNE_EVERY_MS),
                key_prune: KeyPrune::default(),
                shown_url: parsed.shown,
                options,
            }),
        })
    }

    /// Closes the broker's connections. Other clones stop working.
    pub async fn close(&self) {
        self.inner.conns.close().await;
        self.inner.claims.close().await;
        self.inner.vacuum.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement of the broker runs on connections that plan as `PLANNING` says;
    /// above all, JIT stays off (see `PLANNING` for what it cost). The server is the one
    /// the integration tests use.
    #[tokio::test]
    async fn claim_and_call_connections_plan_without_jit() {
        let url = std::env::var("HOPPER_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let options = PgOptions::default().schema(hopper_testkit::unique_name("hopper_t"));
        crate::migrate_with(&url, &options).await.unwrap();
        let schema = options.schema.clone();
        let broker = PgBroker::connect_with(&url, options).await.unwrap();
        let mut seen: Vec<(&str, String)> = Vec::new();
        for conns in [&broker.inner.conns, &broker.inner.claims] {
            let mut held = conns.get().await.unwrap();
            for name in ["plan_cache_mode", "enable_seqscan", "jit"] {
                let value: String = sqlx::query_scalar(&format!("SHOW {name}"))
                    .fetch_one(held.conn())
                    .await
                    .unwrap();
                seen.push((name, value));
            }
        }
        let mut held = broker.inner.vacuum.get().await.unwrap();
        sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(held.conn())
            .await
            .unwrap();
        drop(held);
        broker.close().await;
        let planning = [
            ("plan_cache_mode", "force_generic_plan"),
            ("enable_seqscan", "off"),
            ("jit", "off"),
        ];
        let wanted: Vec<_> = planning
            .iter()
            .chain(&planning)
            .map(|&(n, v)| (n, v.to_owned()))
            .collect();
        assert_eq!(seen, wanted, "calls', then claims' connections");
    }
}
