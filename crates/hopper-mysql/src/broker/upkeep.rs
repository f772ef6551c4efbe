//! What heartbeats run at most once a minute besides their own report: the deletion of
//! unique holds that lapsed and of the rows of ordering keys that have no unfinished job,
//! each a walk over its table a window at a time that goes on from where the last stopped.
//! A failure is logged, not reported: the heartbeat that asked has been recorded.

use std::sync::{Mutex, PoisonError};

use hopper_core::Millis;

use super::MySqlBroker;
use crate::conn::{Repeat, run};
use crate::queries::{self, PruneCursor};

fn cursor_of(cursor: &Mutex<PruneCursor>) -> PruneCursor {
    cursor
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

fn store(cursor: &Mutex<PruneCursor>, at: PruneCursor) {
    *cursor.lock().unwrap_or_else(PoisonError::into_inner) = at;
}

impl MySqlBroker {
    /// Deletes unique holds that lapsed.
    pub(super) async fn prune_holds(&self, now: Option<Millis>) {
        let cursor = cursor_of(&self.inner.prune_cursor);
        let pruned = run!(
            &self.inner.conns,
            "deleting lapsed unique keys",
            Repeat::Safe,
            |conn| { queries::prune_holds(conn, cursor.clone(), now) }
        );
        match pruned {
            Ok((cursor, _)) => store(&self.inner.prune_cursor, cursor),
            Err(e) => tracing::warn!(url = %self.url(), error = %e, "pruning unique keys"),
        }
    }

    /// Deletes the rows of ordering keys that have no unfinished job, so that the table
    /// holds about as many rows as keys in use, whatever number of keys were ever used.
    pub(super) async fn prune_lines(&self) {
        let cursor = cursor_of(&self.inner.lines_cursor);
        let pruned = run!(
            &self.inner.conns,
            "deleting the rows of idle ordering keys",
            Repeat::Safe,
            |conn| { queries::prune_lines(conn, cursor.clone()) }
        );
        match pruned {
            Ok((cursor, _)) => store(&self.inner.lines_cursor, cursor),
            Err(e) => tracing::warn!(url = %self.url(), error = %e, "pruning ordering keys"),
        }
    }
}
