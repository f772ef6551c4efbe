//! Every statement the broker runs, one per file under `sql/`, so that SQL reads as SQL and
//! the same tree can be laid out for every SQL backend. All values are bound parameters;
//! job states appear as literals so that SQLite can match the partial indexes.
//!
//! Transaction control is here too, so that it is prepared once and cached like the rest
//! (parsing `SAVEPOINT` and `RELEASE` for every command cost a sixth of the thread's time).
//! Only opening the file goes through rusqlite's pragma and transaction calls (`schema`).

macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident = $file:literal;)*) => {
        $(
            $(#[$doc])*
            pub(crate) const $name: &str = include_str!(concat!("../sql/", $file));
        )*

        /// Every statement with its name, for the query-plan test.
        #[cfg(test)]
        const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),*];
    };
}

statements! {
    /// Starts a group that writes, taking the write lock at once.
    BEGIN_WRITE = "begin_write.sql";
    /// Starts a group that only reads.
    BEGIN_READ = "begin_read.sql";
    /// Ends a group.
    COMMIT = "commit.sql";
    /// Abandons a group.
    ROLLBACK = "rollback.sql";
    /// Opens the savepoint each command runs in.
    SAVEPOINT = "savepoint.sql";
    /// Closes a command's savepoint, keeping its changes in the group.
    RELEASE_SAVEPOINT = "release_savepoint.sql";
    /// Undoes a failed command's changes (the savepoint is then released).
    ROLLBACK_TO_SAVEPOINT = "rollback_to_savepoint.sql";
    /// Adds one pending job; returns nothing (the id is the new rowid).
    INSERT_JOB = "insert_job.sql";
    /// Dead-letters jobs whose lease expired on their last allowed attempt.
    REAP_FINAL_ATTEMPTS = "reap_final_attempts.sql";
    /// Returns jobs whose lease expired to pending.
    REAP_EXPIRED_LEASES = "reap_expired_leases.sql";
    /// The next due jobs of one priority level of a queue, in fetch order: the candidates
    /// of a claim.
    CLAIM_CANDIDATES = "claim_candidates.sql";
    /// Dead-letters a pending row that cannot be read as a job, with the reason.
    BURY_PENDING = "bury_pending.sql";
    /// The next priority level down among a queue's pending jobs.
    NEXT_LEVEL = "next_level.sql";
    /// Claims one job under a lease, only while it is still pending.
    CLAIM_JOB = "claim_job.sql";
    /// The earliest `run_at` after now among one priority level of a queue's pending jobs.
    NEXT_DUE = "next_due.sql";
    /// Removes an acknowledged job held under the named lease.
    SETTLE_ACK = "settle_ack.sql";
    /// Returns a job held under the named lease to pending at a later `run_at`.
    SETTLE_RETRY = "settle_retry.sql";
    /// Dead-letters a job held under the named lease.
    SETTLE_DEAD_LETTER = "settle_dead_letter.sql";
    /// Hands back a job held under the named lease without charging the attempt.
    SETTLE_RELEASE = "settle_release.sql";
    /// Cancels a job held under the named lease.
    SETTLE_CANCEL = "settle_cancel.sql";
    /// Extends the leases, of a JSON list, that have not expired yet.
    RENEW_LEASE = "renew_lease.sql";
    /// Cancels a job if it is still pending.
    CANCEL_PENDING = "cancel_pending.sql";
    /// A job's state and lease.
    JOB_LEASE = "job_lease.sql";
    /// One job's full record.
    JOB_RECORD = "job_record.sql";
    /// A queue's jobs by state.
    COUNTS = "counts.sql";
    /// A queue's dead letters, oldest first.
    DEAD_LETTERS = "dead_letters.sql";
    /// Removes every job of a queue.
    PURGE = "purge.sql";
}

/// The schema migrations, in order; the position plus one is the version recorded in
/// `PRAGMA user_version` once the migration has run.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_create_jobs.sql"),
    include_str!("../migrations/0002_one_lease_index.sql"),
    include_str!("../migrations/0003_range_checks.sql"),
];

#[cfg(test)]
mod tests {
    use rusqlite::Connection;
    use rusqlite::types::Null;

    use super::{ALL, MIGRATIONS};

    /// The steps of each statement's query plan, on the migrated schema.
    fn plans() -> Vec<(&'static str, Vec<String>)> {
        let conn = Connection::open_in_memory().unwrap();
        for migration in MIGRATIONS {
            conn.execute_batch(migration).unwrap();
        }
        ALL.iter()
            .map(|(name, sql)| {
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
                let nulls = vec![Null; stmt.parameter_count()];
                let steps = stmt
                    .query_map(rusqlite::params_from_iter(nulls), |row| row.get(3))
                    .unwrap()
                    .collect::<rusqlite::Result<Vec<String>>>()
                    .unwrap();
                (*name, steps)
            })
            .collect()
    }

    #[test]
    fn no_statement_scans_the_table_or_sorts() {
        for (name, steps) in plans() {
            for step in &steps {
                // Purging a queue is rare enough not to pay for an index on `queue` alone.
                let allowed_scan = name == "PURGE";
                let full_scan = step == "SCAN hopper_jobs";
                let sorts = step.contains("TEMP B-TREE");
                assert!(
                    !sorts && (allowed_scan || !full_scan),
                    "{name}: plan step `{step}` in {steps:?}"
                );
            }
        }
    }

    #[test]
    fn claims_walk_the_ready_index_in_fetch_order() {
        let (_, steps) = plans()
            .into_iter()
            .find(|(n, _)| *n == "CLAIM_CANDIDATES")
            .unwrap();
        assert!(
            steps.iter().any(|s| s.contains("INDEX hopper_jobs_ready")),
            "{steps:?}"
        );
        // A range of one priority level's due jobs, not the whole queue filtered by run_at:
        // a claim never walks over jobs delayed into the future.
        assert!(
            steps.iter().any(|s| s.contains("priority=? AND run_at<?")),
            "{steps:?}"
        );
    }
}
