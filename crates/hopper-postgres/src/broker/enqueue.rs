//! Enqueueing: one statement for any number of jobs, on the broker's connections or inside
//! the caller's own transaction ([`PgBroker::enqueue_in`]).
//!
//! A batch without unique keys is one insert (enqueue.sql) that never reads the table of
//! keys. A batch with keys takes enqueue_unique.sql, still one statement: it takes each key
//! or finds its holder, and stores only the jobs that took theirs (or have none). A batch
//! with ordering keys takes enqueue_ordered.sql, one statement too (see `ordering`), and
//! one with both enqueue_unique_ordered.sql. A batch with members of groups takes
//! enqueue_group.sql, one statement that also counts them, or refuses the whole batch when
//! one of its groups is sealed (see `groups`). Rate keys go in the same statement: in the
//! insert of enqueue.sql's form (enqueue_rated.sql) and of enqueue_unique.sql, and beside
//! ordering keys or groups through functions that store the jobs and then their keys
//! (`*_rated.sql`). A batch may not hold both unique keys and members of groups.

use hopper_core::job::earlier_with_key;
use hopper_core::{
    Broker, CheckedJobs, ConfigError, Enqueued, JobId, Millis, NewJob, Result, UniqueScope,
};
use sqlx::Postgres;
use sqlx::Row;
use sqlx::postgres::{PgArguments, PgConnection};
use sqlx::query::Query;

use super::{PgBroker, db_err};
use crate::conn::ended_by_server;

/// How many times a keyed batch is sent again after losing a race the server broke off
/// (a deadlock or serialization failure): keys are locked in one order, so this is a
/// backstop, not a path taken.
const RACE_RETRIES: u32 = 3;

impl PgBroker {
    /// Enqueues inside the caller's own transaction (or connection): the jobs exist if and
    /// only if that transaction commits. Pass `&mut *tx` for an sqlx `Transaction`. A job
    /// whose unique key is held answers with the holder's id, as
    /// [`Broker::enqueue`] does; [`enqueue_in_reported`](Self::enqueue_in_reported) says
    /// which jobs those were.
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<JobId>> {
        let done = self.enqueue_in_reported(conn, jobs).await?;
        Ok(done.into_iter().map(|e| e.id).collect())
    }

    /// [`enqueue_in`](Self::enqueue_in), saying for each job whether it was stored or a
    /// job holding its unique key was already there
    /// ([`Broker::enqueue_reported`]). The keys a batch takes stay locked until the
    /// caller's transaction ends, so other producers of the same keys wait for it; and
    /// unlike [`Broker::enqueue`], a batch that loses a deadlock to another transaction is
    /// not sent again (the caller's transaction is aborted): keep such transactions short.
    /// Under `REPEATABLE READ` or `SERIALIZABLE` a hold is judged from the transaction's
    /// snapshot: no duplicate gets in (a key changed since fails the transaction with a
    /// serialization error), but a duplicate may be answered with a holder that has
    /// finished since the snapshot.
    pub async fn enqueue_in_reported(
        &self,
        conn: &mut PgConnection,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<Enqueued>> {
        let checked = CheckedJobs::check_within(jobs, &self.limits())?;
        if checked.is_empty() {
            return Ok(Vec::new());
        }
        refuse_unique_beside_groups(&checked)?;
        let batch = Batch::new(checked, self.now());
        self.send(conn, &batch)
            .await
            .map_err(db_err("enqueueing jobs"))?
    }

    /// Inserts jobs already checked on the broker's own connections, and says what became
    /// of each. When the server ended the session before the statement committed (SQLSTATE
    /// 57P or 08: the error came from the server, so the transaction was rolled back), the
    /// jobs are inserted once more on a new connection. A connection that broke without a
    /// word from the server (the insert may have committed) is not tried again: that could
    /// enqueue the jobs twice. A keyed batch that lost a deadlock was rolled back too, and
    /// is sent again.
    pub(super) async fn insert_held(&self, jobs: CheckedJobs) -> Result<Vec<Enqueued>> {
        refuse_unique_beside_groups(&jobs)?;
        let batch = Batch::new(jobs, self.now());
        let (mut ended, mut races) = (false, 0);
        loop {
            let mut held = self.inner.conns.get().await?;
            match self.send(held.conn(), &batch).await {
                Ok(done) => return done,
                Err(e) => {
                    held.check(&e);
                    if !ended && ended_by_server(&e) {
                        ended = true;
                        continue;
                    }
                    let locks =
                        batch.keys.is_some() || batch.ordering.is_some() || batch.groups.is_some();
                    if locks && races < RACE_RETRIES && lost_a_race(&e) {
                        races += 1;
                        continue;
                    }
                    return Err(db_err("enqueueing jobs")(e));
                }
            }
        }
    }

    /// Sends `batch` in one statement: enqueue.sql when no job has a key,
    /// enqueue_unique.sql for unique keys, enqueue_ordered.sql for ordering keys,
    /// enqueue_unique_ordered.sql for both,
    /// enqueue_rated.sql for rate keys alone, enqueue_ordered_rated.sql for both. Says what
    /// became of each job, in input order. A batch with members of groups takes
    /// enqueue_group.sql (or enqueue_group_rated.sql), and is refused (the inner error) when
    /// one of them is sealed.
    async fn send(
        &self,
        conn: &mut PgConnection,
        batch: &Batch,
    ) -> sqlx::Result<Result<Vec<Enqueued>>> {
        if let Some(groups) = &batch.groups {
            return self.send_members(conn, batch, groups).await;
        }
        let sql = match (&batch.keys, &batch.ordering, &batch.rate) {
            (Some(_), Some(_), _) => &self.inner.sql.enqueue_unique_ordered,
            (Some(_), None, _) => &self.inner.sql.enqueue_unique,
            (None, Some(_), None) => &self.inner.sql.enqueue_ordered,
            (None, Some(_), Some(_)) => &self.inner.sql.enqueue_ordered_rated,
            (None, None, Some(_)) => &self.inner.sql.enqueue_rated,
            (None, None, None) => &self.inner.sql.enqueue,
        };
        let mut query = batch.query(sql);
        query = match &batch.ordering {
            Some(keys) => query.bind(keys).bind(&self.inner.channel),
            None => query.bind(&self.inner.channel),
        };
        match (&batch.keys, &batch.ordering) {
            (Some(keys), _) => {
                query = query
                    .bind(&keys.keys)
                    .bind(&keys.scopes)
                    .bind(&keys.periods)
                    .bind(&batch.rate);
            }
            (None, _) if batch.rate.is_some() => query = query.bind(&batch.rate),
            (None, _) => {}
        }
        let rows = query.fetch_all(conn).await?;
        let done = match &batch.keys {
            None => rows
                .iter()
                .map(|row| Ok(Enqueued::stored(JobId(row.try_get(0)?))))
                .collect::<sqlx::Result<Vec<_>>>(),
            Some(keys) => {
                let sent = rows
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                    .collect::<sqlx::Result<Vec<_>>>()?;
                Ok(keys.answers(&sent))
            }
        }?;
        Ok(Ok(done))
    }

    /// Sends a batch with members of groups (enqueue_group.sql): stored and counted, or
    /// refused, storing nothing, when one of its groups is sealed.
    async fn send_members(
        &self,
        conn: &mut PgConnection,
        batch: &Batch,
        groups: &[Option<String>],
    ) -> sqlx::Result<Result<Vec<Enqueued>>> {
        let no_keys;
        let keys = match &batch.ordering {
            Some(keys) => keys,
            None => {
                no_keys = vec![None::<String>; groups.len()];
                &no_keys
            }
        };
        let sql = match batch.rate {
            Some(_) => &self.inner.sql.enqueue_group_rated,
            None => &self.inner.sql.enqueue_group,
        };
        let rows = batch
            .query(sql)
            .bind(keys)
            .bind(groups)
            .bind(&self.inner.channel)
            .bind(&batch.rate)
            .fetch_all(conn)
            .await?;
        let mut done = Vec::with_capacity(rows.len());
        for row in &rows {
            let (id, refused): (Option<i64>, Option<String>) = (row.try_get(0)?, row.try_get(1)?);
            if let Some(group) = refused {
                return Ok(Err(hopper_core::group::closed_to_members(&group)));
            }
            if let Some(id) = id {
                done.push(Enqueued::stored(JobId(id)));
            }
        }
        Ok(Ok(done))
    }
}

/// Refuses a batch holding both a unique key and a member of a group, naming the group:
/// enqueue_group.sql takes no unique keys, and would store the duplicates.
fn refuse_unique_beside_groups(jobs: &CheckedJobs) -> Result<()> {
    let group = jobs.iter().find_map(|j| j.group.as_deref());
    match group.filter(|_| jobs.iter().any(|j| j.unique.is_some())) {
        Some(group) => {
            let allowed = "no job with a unique key in the same batch: enqueue them apart";
            Err(ConfigError::new("group", group.escape_debug(), allowed).into())
        }
        None => Ok(()),
    }
}

/// Whether the server broke off a statement to resolve a race between transactions: a
/// deadlock (40P01) or a serialization failure (40001). The statement was rolled back.
fn lost_a_race(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("40P01" | "40001")),
        _ => false,
    }
}

/// A batch ready to send: the columns of the jobs sent, and their keys when any has one.
/// Every array holds the jobs sent only: a job whose unique key an earlier job of the
/// batch has is answered by [`Keys::answers`], not sent.
struct Batch {
    arrays: EnqueueArrays,
    /// The broker's clock, or `None` for the database's: one reading for the whole batch,
    /// its run times, creation times and the ends of its keys' periods alike.
    now: Option<Millis>,
    keys: Option<Keys>,
    /// Each job's ordering key, when any job has one.
    ordering: Option<Vec<Option<String>>>,
    /// Each job's group, when any job is a member of one (never beside unique keys).
    groups: Option<Vec<Option<String>>>,
    /// Each job's rate key, when any job has one.
    rate: Option<Vec<Option<String>>>,
}

/// The keys of a batch in which some job has one. Only the first job of each queue and key
/// is sent (`earlier`); the others are answered with its outcome.
struct Keys {
    keys: Vec<Option<String>>,
    scopes: Vec<Option<i16>>,
    /// The period of a [`UniqueScope::For`](hopper_core::UniqueScope::For), in ms.
    periods: Vec<Option<i64>>,
    /// Per job of the batch, the earlier job with the same key that stands for it.
    earlier: Vec<Option<usize>>,
}

impl Batch {
    /// `sql` with the batch's job columns and clock bound as its first 8 parameters, as
    /// every enqueue statement takes them.
    fn query<'q>(&'q self, sql: &'q str) -> Query<'q, Postgres, PgArguments> {
        let a = &self.arrays;
        sqlx::query(sql)
            .bind(&a.queues)
            .bind(&a.payloads)
            .bind(&a.priorities)
            .bind(&a.run_at)
            .bind(&a.delay_ms)
            .bind(&a.max_attempts)
            .bind(&a.headers)
            .bind(self.now)
    }

    fn new(jobs: CheckedJobs, now: Option<Millis>) -> Self {
        let keyed = jobs.iter().any(|j| j.unique.is_some());
        let mut keys = keyed.then(|| Keys {
            keys: Vec::with_capacity(jobs.len()),
            scopes: Vec::with_capacity(jobs.len()),
            periods: Vec::with_capacity(jobs.len()),
            earlier: earlier_with_key(&jobs),
        });
        let ordered = jobs.iter().any(|j| j.ordering_key.is_some());
        let mut ordering = ordered.then(|| Vec::with_capacity(jobs.len()));
        let grouped = jobs.iter().any(|j| j.group.is_some());
        let mut groups = grouped.then(|| Vec::with_capacity(jobs.len()));
        let rated = jobs.iter().any(|j| j.rate_key.is_some());
        let mut rate = rated.then(|| Vec::with_capacity(jobs.len()));
        let mut a = EnqueueArrays::with_capacity(jobs.len());
        for (i, mut job) in jobs.into_iter().enumerate() {
            // A job whose unique key an earlier job of the batch has is answered here, not
            // sent: it has no place in any of the arrays.
            if keys.as_ref().is_some_and(|k| k.earlier[i].is_some()) {
                continue;
            }
            if let Some(o) = &mut ordering {
                o.push(job.ordering_key.take());
            }
            if let Some(g) = &mut groups {
                g.push(job.group.take());
            }
            if let Some(k) = &mut keys {
                let unique = job.unique.take();
                k.scopes.push(unique.as_ref().map(|u| u.scope.code()));
                // The statement adds the period to its `now` for `until`.
                k.periods.push(match unique.as_ref().map(|u| u.scope) {
                    Some(UniqueScope::For(period)) => Some(period.as_millis() as i64),
                    _ => None,
                });
                k.keys.push(unique.map(|u| u.key));
            }
            if let Some(r) = &mut rate {
                r.push(job.rate_key.take());
            }
            a.push(job, now);
        }
        Batch {
            arrays: a,
            now,
            keys,
            ordering,
            groups,
            rate,
        }
    }
}

impl Keys {
    /// What became of each job of the batch, given each sent job's id and its key's
    /// holder (enqueue_unique.sql's rows, in order).
    fn answers(&self, sent: &[(i64, Option<i64>)]) -> Vec<Enqueued> {
        let mut sent = sent.iter();
        let mut done: Vec<Enqueued> = Vec::with_capacity(self.earlier.len());
        for earlier in &self.earlier {
            let answer = match earlier {
                Some(first) => Enqueued::existing(done[*first].id),
                None => match sent.next() {
                    Some(&(id, Some(holder))) if holder != id => Enqueued::existing(JobId(holder)),
                    Some(&(id, _)) => Enqueued::stored(JobId(id)),
                    None => break,
                },
            };
            done.push(answer);
        }
        done
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

    fn push(&mut self, job: NewJob, now: Option<Millis>) {
        let (run_at, delay) = job.run_at_parts(now);
        self.priorities.push(job.priority);
        self.run_at.push(run_at);
        self.delay_ms.push(delay);
        self.max_attempts
            .push(job.max_attempts.min(i32::MAX as u32) as i32);
        self.headers.push(job.headers_json());
        self.queues.push(job.queue);
        self.payloads.push(job.payload);
    }
}
