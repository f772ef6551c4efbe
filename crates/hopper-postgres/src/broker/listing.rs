//! Listing a queue's jobs of one state a page at a time: keyset paging, each page one
//! statement that reads an index range from the cursor on (see `sql/list_*.sql`), so the
//! millionth page costs what the first does.

use hopper_core::admin::{Cursor, JobPage, JobQuery, ListState};
use hopper_core::{JobId, JobRecord, Result};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::rows::record_from_row;
use super::{PgBroker, db_err};

impl PgBroker {
    /// [`Broker::list_jobs`](hopper_core::Broker::list_jobs), its query already validated.
    pub(super) async fn list_page(&self, query: &JobQuery) -> Result<JobPage> {
        let sql = &self.inner.sql;
        let newest = query.newest_first;
        let waiting = matches!(query.state, ListState::Pending | ListState::Scheduled);
        // The first page starts from a cursor every job sorts after: waiting jobs list
        // highest priority first, the others smallest key first; newest first reverses both.
        let start = if waiting == newest {
            i64::MIN
        } else {
            i64::MAX
        };
        let after = query.after.unwrap_or(Cursor {
            key: start,
            sub: 0,
            id: JobId(start),
        });
        let limit = query.limit as i64;
        let statement = match (query.state, newest) {
            (ListState::Pending | ListState::Scheduled, false) => &sql.list_waiting,
            (ListState::Pending | ListState::Scheduled, true) => &sql.list_waiting_desc,
            (ListState::Leased, false) => &sql.list_leased,
            (ListState::Leased, true) => &sql.list_leased_desc,
            (_, false) => &sql.list_finished,
            (_, true) => &sql.list_finished_desc,
        };
        let statement = sqlx::query(statement).bind(&query.queue);
        let statement = match query.state {
            ListState::Pending | ListState::Scheduled => statement
                .bind(self.now())
                .bind(query.state == ListState::Pending)
                .bind(after.key)
                .bind(after.sub),
            ListState::Leased => statement.bind(after.key),
            ListState::Dead => statement.bind(3i16).bind(after.key),
            ListState::Completed => statement.bind(2i16).bind(after.key),
            ListState::Cancelled => statement.bind(4i16).bind(after.key),
        };
        let mut held = self.inner.conns.get().await?;
        let rows = statement
            .bind(after.id.0)
            .bind(limit)
            .fetch_all(held.conn())
            .await
            .map_err(|e| held.fail("listing jobs", e))?;
        drop(held);
        let page: Result<Vec<(Cursor, JobRecord)>, sqlx::Error> = rows
            .iter()
            .map(|row| {
                let record = record_from_row(row)?;
                Ok((cursor_of(query.state, row, &record)?, record))
            })
            .collect();
        let page = page.map_err(db_err("decoding listed jobs"))?;
        let next = page
            .last()
            .map(|(cursor, _)| *cursor)
            .filter(|_| page.len() == query.limit);
        let jobs = page.into_iter().map(|(_, record)| record).collect();
        Ok(JobPage { jobs, next })
    }
}

/// The cursor of a listed row: its sort key in the listing of `state`.
fn cursor_of(state: ListState, row: &PgRow, record: &JobRecord) -> Result<Cursor, sqlx::Error> {
    let id = record.job.id;
    Ok(match state {
        ListState::Pending | ListState::Scheduled => Cursor {
            key: i64::from(record.job.priority),
            sub: record.job.run_at,
            id,
        },
        ListState::Leased => Cursor {
            key: row.try_get::<Option<i64>, _>("lease_expires")?.unwrap_or(0),
            sub: 0,
            id,
        },
        _ => Cursor {
            key: record.finished_at.unwrap_or(0),
            sub: 0,
            id,
        },
    })
}
