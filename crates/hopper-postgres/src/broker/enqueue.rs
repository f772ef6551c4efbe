//! Enqueueing: one statement for any number of jobs, on the broker's connections or inside
//! the caller's own transaction ([`PgBroker::enqueue_in`]).

use hopper_core::{CheckedJobs, JobId, NewJob, Result};
use sqlx::postgres::PgConnection;

use super::{PgBroker, db_err};

impl PgBroker {
    /// Enqueues inside the caller's own transaction (or connection): the jobs exist if and
    /// only if that transaction commits. Pass `&mut *tx` for an sqlx `Transaction`.
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<JobId>> {
        self.insert(conn, CheckedJobs::check(jobs)?).await
    }

    /// Inserts jobs already checked, on `conn`, in one statement.
    pub(super) async fn insert(
        &self,
        conn: &mut PgConnection,
        jobs: CheckedJobs,
    ) -> Result<Vec<JobId>> {
        let query = self.enqueue_arrays(jobs);
        let rows = sqlx::query_scalar::<_, i64>(&self.inner.sql.enqueue)
            .bind(query.queues)
            .bind(query.payloads)
            .bind(query.priorities)
            .bind(query.run_at)
            .bind(query.delay_ms)
            .bind(query.max_attempts)
            .bind(query.headers)
            .bind(self.now())
            .bind(&self.inner.channel)
            .fetch_all(conn)
            .await
            .map_err(db_err("enqueueing jobs"))?;
        Ok(rows.into_iter().map(JobId).collect())
    }

    /// The statement's arrays, one element per job, taking the jobs' queues and payloads.
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
