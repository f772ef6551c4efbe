//! Enqueueing: one statement for any number of jobs, on the broker's connections or inside
//! the caller's own transaction ([`PgBroker::enqueue_in`]).

use hopper_core::{Broker, CheckedJobs, JobId, NewJob, Result};
use sqlx::postgres::PgConnection;

use super::{PgBroker, db_err};
use crate::conn::ended_by_server;

impl PgBroker {
    /// Enqueues inside the caller's own transaction (or connection): the jobs exist if and
    /// only if that transaction commits. Pass `&mut *tx` for an sqlx `Transaction`.
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<JobId>> {
        let checked = CheckedJobs::check_within(jobs, &self.limits())?;
        self.insert(conn, checked).await
    }

    /// Inserts jobs already checked, on `conn`, in one statement.
    pub(super) async fn insert(
        &self,
        conn: &mut PgConnection,
        jobs: CheckedJobs,
    ) -> Result<Vec<JobId>> {
        let query = self.enqueue_arrays(jobs);
        self.insert_arrays(conn, &query)
            .await
            .map_err(db_err("enqueueing jobs"))
    }

    /// Inserts jobs already checked on the broker's own connections. When the server ended
    /// the session before the statement committed (SQLSTATE 57P or 08: the error came from
    /// the server, so the transaction was rolled back), the jobs are inserted once more on
    /// a new connection. A connection that broke without a word from the server (the
    /// insert may have committed) is not tried again: that could enqueue the jobs twice.
    pub(super) async fn insert_held(&self, jobs: CheckedJobs) -> Result<Vec<JobId>> {
        let query = self.enqueue_arrays(jobs);
        let mut again = true;
        loop {
            let mut held = self.inner.conns.get().await?;
            match self.insert_arrays(held.conn(), &query).await {
                Ok(ids) => return Ok(ids),
                Err(e) => {
                    held.check(&e);
                    if again && ended_by_server(&e) {
                        again = false;
                        continue;
                    }
                    return Err(db_err("enqueueing jobs")(e));
                }
            }
        }
    }

    async fn insert_arrays(
        &self,
        conn: &mut PgConnection,
        query: &EnqueueArrays,
    ) -> sqlx::Result<Vec<JobId>> {
        let rows = sqlx::query_scalar::<_, i64>(&self.inner.sql.enqueue)
            .bind(&query.queues)
            .bind(&query.payloads)
            .bind(&query.priorities)
            .bind(&query.run_at)
            .bind(&query.delay_ms)
            .bind(&query.max_attempts)
            .bind(&query.headers)
            .bind(self.now())
            .bind(&self.inner.channel)
            .fetch_all(conn)
            .await?;
        Ok(rows.into_iter().map(JobId).collect())
    }

    fn enqueue_arrays(&self, jobs: CheckedJobs) -> EnqueueArrays {
        let now = self.now();
        let mut a = EnqueueArrays::with_capacity(jobs.len());
        for job in jobs {
            let (run_at, delay) = job.run_at_parts(now);
            a.priorities.push(job.priority);
            a.run_at.push(run_at);
            a.delay_ms.push(delay);
            a.max_attempts
                .push(job.max_attempts.min(i32::MAX as u32) as i32);
            a.headers.push(job.headers_json());
            a.queues.push(job.queue);
            a.payloads.push(job.payload);
        }
        a
    }
}

#[derive(Default)]
struct EnqueueArrays {
    queues: Vec<String>,
    payloads: Vec<Vec<u8>>,
    priorities: Vec<i32>,
    run_at: Vec<Option<i64>>,
    delay_ms: Vec<i64>,
    max_attempts: Vec<i32>,
    headers: Vec<Option<String>>,
}

impl EnqueueArrays {
    fn with_capacity(n: usize) -> Self {
        EnqueueArrays {
            queues: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            priorities: Vec::with_capacity(n),
            run_at: Vec::with_capacity(n),
            delay_ms: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            headers: Vec::with_capacity(n),
        }
    }
}
