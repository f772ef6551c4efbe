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
    /// The same for a job with a unique key, which keeps the key for its record.
    INSERT_KEYED_JOB = "insert_keyed_job.sql";
    /// The same for a job with an ordering key, stored blocked behind a job of its key.
    INSERT_ORDERED_JOB = "insert_ordered_job.sql";
    /// The same for a member of a group, which keeps its group until it is counted.
    INSERT_MEMBER_JOB = "insert_member_job.sql";
    /// Dead-letters jobs whose lease expired on their last allowed attempt; returns each
    /// one's queue, ordering key, id and group.
    REAP_FINAL_ATTEMPTS = "reap_final_attempts.sql";
    /// Returns jobs whose lease expired to pending.
    REAP_EXPIRED_LEASES = "reap_expired_leases.sql";
    /// The next due jobs of one priority level of a queue, in fetch order: the candidates
    /// of a claim. None while the queue is paused, so that no worker of any process takes
    /// from it: the limit is then 0, from one lookup by key in the small table of paused
    /// queues made once per run. (As a `NOT EXISTS` in the WHERE clause, the lookup's
    /// result was tested on every row: 0.5% of a claim's instructions at batch 100. Said
    /// here, not in the file: a statement's text, comments included, is hashed and
    /// compared on every cache lookup of a claim.)
    CLAIM_CANDIDATES = "claim_candidates.sql";
    /// Dead-letters a pending row that cannot be read as a job, with the reason; returns its
    /// queue, ordering key and group.
    BURY_PENDING = "bury_pending.sql";
    /// The next priority level down among a queue's pending jobs.
    NEXT_LEVEL = "next_level.sql";
    /// A claim's first step on a queue, one row: its highest priority level with a pending
    /// job (NULL when it has none), as `NEXT_LEVEL` from the top, beside its rate limit and
    /// window (`max, per_ms, starts`; NULLs when it has no limit). One statement either
    /// way, so that a queue without a limit pays one descent of the small limits table's
    /// key, not a statement of its own: 28 VM steps where `NEXT_LEVEL` took 17. The
    /// aggregate is what makes one row of none: without GROUP BY it always gives one, its
    /// `max()` NULL when the key finds no row, and the bare columns are then NULL too, or
    /// else taken from the row holding that `max()`, the only one. (A LEFT JOIN from a
    /// constant row did the same in 41 steps, the constant made a co-routine. Said here,
    /// not in the file, as for `CLAIM_CANDIDATES`.)
    CLAIM_TOP_LEVEL = "claim_top_level.sql";
    /// Claims one job under a lease, only while it is still pending, stamping its start.
    CLAIM_JOB = "claim_job.sql";
    /// Stores a limited queue's window after a claim, with the limit it was kept under (the
    /// limit as read, unless that was out of range: see [`crate::rate`]).
    SAVE_WINDOW = "save_window.sql";
    /// The earliest `run_at` after now among one priority level of a queue's pending jobs,
    /// blocked ones left out.
    NEXT_DUE = "next_due.sql";
    /// Removes an acknowledged job without an ordering key or a group held under the named
    /// lease. One with either goes through `SETTLE_ACK_ORDERED`, so that this, the most frequent
    /// settlement, costs what it did (see [`crate::ordering`]). (Said here, not in the file,
    /// as for `CLAIM_CANDIDATES`.)
    SETTLE_ACK = "settle_ack.sql";
    /// The same for a job with an ordering key or a group, returning its queue, key and group.
    SETTLE_ACK_ORDERED = "settle_ack_ordered.sql";
    /// Returns a job held under the named lease to pending at a later `run_at`.
    SETTLE_RETRY = "settle_retry.sql";
    /// Dead-letters a job without an ordering key or a group held under the named lease.
    SETTLE_DEAD_LETTER = "settle_dead_letter.sql";
    /// The same for a job with an ordering key or a group, returning its queue, key and group.
    SETTLE_DEAD_LETTER_ORDERED = "settle_dead_letter_ordered.sql";
    /// Hands back a job held under the named lease without charging the attempt.
    SETTLE_RELEASE = "settle_release.sql";
    /// Cancels a job without an ordering key or a group held under the named lease.
    SETTLE_CANCEL = "settle_cancel.sql";
    /// The same for a job with an ordering key or a group, returning its queue, key and group.
    SETTLE_CANCEL_ORDERED = "settle_cancel_ordered.sql";
    /// Puts off a job held under the named lease, its attempt not charged, no error kept.
    SETTLE_SNOOZE = "settle_snooze.sql";
    /// Extends the leases, of a JSON list, that have not expired yet.
    RENEW_LEASE = "renew_lease.sql";
    /// Cancels a job if it is still pending; returns its queue, ordering key, run_at and group.
    CANCEL_PENDING = "cancel_pending.sql";
    /// Unblocks the next job of an ordering key whose head ended.
    UNBLOCK_NEXT = "unblock_next.sql";
    /// Whether an ordering key has a head, after a re-drive.
    KEY_HAS_HEAD = "key_has_head.sql";
    /// Blocks a job with an ordering key that was just retried, stepping aside for the
    /// next jobs of its key, when any wait.
    STEP_ASIDE = "step_aside.sql";
    /// A job's state and lease.
    JOB_LEASE = "job_lease.sql";
    /// One job's full record.
    JOB_RECORD = "job_record.sql";
    /// A queue's jobs by state.
    COUNTS = "counts.sql";
    /// A queue's leased jobs and dead letters, each counted up to a limit.
    BOUNDED_COUNTS = "bounded_counts.sql";
    /// One priority level's due and scheduled jobs of a queue, each counted up to a limit.
    LEVEL_COUNTS = "level_counts.sql";
    /// A queue's dead letters, oldest first.
    DEAD_LETTERS = "dead_letters.sql";
    /// Removes every job of a queue.
    PURGE = "purge.sql";
    /// Removes a queue's members not counted yet, returning each one's group.
    PURGE_MEMBERS = "purge_members.sql";
    /// How many cancelled jobs a queue keeps, which a purge removes without counting.
    /// A page of one priority level's waiting jobs after a cursor, in fetch order.
    LIST_WAITING = "list_waiting.sql";
    /// The same, before a cursor, newest first.
    LIST_WAITING_NEWEST = "list_waiting_newest.sql";
    /// The next priority level up among a queue's pending jobs.
    LEVEL_ABOVE = "level_above.sql";
    /// A page of a queue's leased jobs after a cursor, soonest expiry first.
    LIST_LEASED = "list_leased.sql";
    /// The same, before a cursor, latest expiry first.
    LIST_LEASED_NEWEST = "list_leased_newest.sql";
    /// A page of a queue's jobs in one finished state after a cursor, in the order they
    /// finished.
    LIST_FINISHED = "list_finished.sql";
    /// The same, before a cursor, the latest to finish first.
    LIST_FINISHED_NEWEST = "list_finished_newest.sql";
    /// The ids of a queue's oldest dead letters.
    DEAD_CHUNK = "dead_chunk.sql";
    /// Puts dead letters, of a JSON list of ids, back in their queue, those with an ordering
    /// key blocked; returns each one's queue and ordering key.
    RETRY_DEAD = "retry_dead.sql";
    /// Deletes dead letters, of a JSON list of ids.
    DISCARD_DEAD = "discard_dead.sql";
    /// Pauses a queue, unless it is paused.
    PAUSE_QUEUE = "pause_queue.sql";
    /// Resumes a queue, if it is paused.
    RESUME_QUEUE = "resume_queue.sql";
    /// Whether a queue is paused.
    QUEUE_PAUSED = "queue_paused.sql";
    /// Sets a queue's rate limit, keeping its window if it had one.
    SET_RATE_LIMIT = "set_rate_limit.sql";
    /// Lifts a queue's rate limit.
    LIFT_RATE_LIMIT = "lift_rate_limit.sql";
    /// A queue's rate limit, without its window.
    RATE_LIMIT = "rate_limit.sql";
    /// Drops every key window of a queue.
    DROP_RATE_KEYS = "drop_rate_keys.sql";
    /// Gives a job its rate key.
    SET_RATE_KEY = "set_rate_key.sql";
    /// A job's rate key.
    JOB_RATE_KEY = "job_rate_key.sql";
    /// A key's window: its starts.
    KEY_WINDOW = "key_window.sql";
    /// Writes a key's window.
    SAVE_KEY_WINDOW = "save_key_window.sql";
    /// Drops a key's window.
    DROP_KEY_WINDOW = "drop_key_window.sql";
    /// Moves a pending job held back by its key's window to a later time.
    DEFER_JOB = "defer_job.sql";
    /// Drops a queue's idle key windows.
    SWEEP_RATE_KEYS = "sweep_rate_keys.sql";
    /// Notes when a queue's key windows were last swept.
    RATE_KEYS_SWEPT = "rate_keys_swept.sql";
    /// The earliest `run_at` up to now among one priority level of a queue's pending jobs.
    OLDEST_DUE = "oldest_due.sql";
    /// The names of the queues with jobs, paused or limited, unsorted, some more than once.
    QUEUE_NAMES = "queue_names.sql";
    /// Stores a worker's report, replacing its previous one.
    UPSERT_WORKER = "upsert_worker.sql";
    /// Adds settled counts to a queue's throughput bucket.
    ADD_THROUGHPUT = "add_throughput.sql";
    /// Deletes the workers whose report expired.
    PRUNE_WORKERS = "prune_workers.sql";
    /// Deletes the throughput buckets older than kept.
    PRUNE_THROUGHPUT = "prune_throughput.sql";
    /// Deletes one worker; returns nothing (the change count says whether it was there).
    DEREGISTER_WORKER = "deregister_worker.sql";
    /// The workers whose report has not expired, in no order.
    LIVE_WORKERS = "live_workers.sql";
    /// A queue's throughput buckets after a time, oldest first.
    THROUGHPUT = "throughput.sql";
    /// The job holding a key of a queue, if its hold still stands.
    UNIQUE_HOLDER = "unique_holder.sql";
    /// Makes a job the holder of a key, taking over a stale hold.
    TAKE_UNIQUE_KEY = "take_unique_key.sql";
    /// The next keys after a cursor, in key order, each with whether its hold stands.
    UNIQUE_CHUNK = "unique_chunk.sql";
    /// Deletes a key while the job the sweep found stale still holds it.
    DROP_UNIQUE_KEY = "drop_unique_key.sql";
    /// Whether a group is sealed; no row for a group never heard of.
    GROUP_SEALED = "group_sealed.sql";
    /// Counts new members of a group, making the group if it is new.
    ADD_MEMBERS = "add_members.sql";
    /// Counts settled members of a group; returns whether its completion job is due.
    COUNT_MEMBERS = "count_members.sql";
    /// Records a member that died, after those that died before it.
    ADD_GROUP_DEAD = "add_group_dead.sql";
    /// Takes a counted member out of its group.
    FORGET_MEMBER = "forget_member.sql";
    /// Seals a group with its completion job.
    SEAL_GROUP = "seal_group.sql";
    /// A group's counts and completion job, to enqueue it.
    GROUP_COMPLETION = "group_completion.sql";
    /// Records the id of a group's completion job, unless it has one.
    SET_GROUP_COMPLETION = "set_group_completion.sql";
    /// A group's counts, seal and completion job's id.
    GROUP_STATUS = "group_status.sql";
    /// The ids of a group's members that died, in the order they did.
    GROUP_DEAD_IDS = "group_dead_ids.sql";
}

/// The schema migrations, in order; the position plus one is the version recorded in
/// `PRAGMA user_version` once the migration has run.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_create_jobs.sql"),
    include_str!("../migrations/0002_one_lease_index.sql"),
    include_str!("../migrations/0003_range_checks.sql"),
    include_str!("../migrations/0004_operator_calls.sql"),
    include_str!("../migrations/0005_worker_registry.sql"),
    include_str!("../migrations/0006_unique_keys.sql"),
    include_str!("../migrations/0007_worker_schedules.sql"),
    include_str!("../migrations/0008_job_unique_key.sql"),
    include_str!("../migrations/0009_ordering_keys.sql"),
    include_str!("../migrations/0010_rate_limits.sql"),
    include_str!("../migrations/0011_groups.sql"),
    include_str!("../migrations/0012_rate_keys.sql"),
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

    /// Every statement stays in the connection's cache, with room to spare for the few
    /// made elsewhere (the data version, the registry's).
    #[test]
    fn the_cache_holds_every_statement() {
        assert!(
            ALL.len() + 10 <= crate::schema::STATEMENT_CACHE,
            "{}",
            ALL.len()
        );
    }

    #[test]
    fn no_statement_scans_the_table_or_sorts() {
        for (name, steps) in plans() {
            for step in &steps {
                // Purging a queue is rare enough not to pay for an index on `queue` alone.
                let allowed_scan = name == "PURGE" || name == "PURGE_MEMBERS";
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
        // A paused queue is one lookup by key, not a walk of the paused table.
        assert!(
            steps
                .iter()
                .any(|s| s == "SEARCH hopper_paused USING PRIMARY KEY (queue=?)"),
            "{steps:?}"
        );
    }

    /// A claim's first step reads the queue's top priority level as `NEXT_LEVEL` does, a
    /// descent of the ready index, and its rate limit by key: nothing else, so that a
    /// queue without a limit pays one lookup in an empty table for it.
    #[test]
    fn a_claim_finds_the_top_level_and_the_limit_by_key() {
        let (_, steps) = plans()
            .into_iter()
            .find(|(n, _)| *n == "CLAIM_TOP_LEVEL")
            .unwrap();
        assert!(
            steps
                .iter()
                .any(|s| s == "SEARCH hopper_jobs USING COVERING INDEX hopper_jobs_ready (queue=?)"),
            "{steps:?}"
        );
        assert!(
            steps
                .iter()
                .any(|s| s == "SEARCH r USING PRIMARY KEY (queue=?)"),
            "{steps:?}"
        );
        assert_eq!(steps.len(), 3, "and the scalar subquery: {steps:?}");
    }

    /// A glance's counts (`queue_glance`) read the indexes the exact counts read, the
    /// waiting jobs a priority level at a time: each count is a range of an index, or the
    /// leased jobs' expiry index as `COUNTS` reads it, that its LIMIT cuts short. Pending
    /// and scheduled jobs are ranges of one level each, because across levels one of them
    /// would be a filter over the whole queue (`COUNTS`): counting scheduled jobs would
    /// walk every due one.
    #[test]
    fn bounded_counts_read_ranges_of_the_same_indexes() {
        let plans = plans();
        let steps = |name: &str| &plans.iter().find(|(n, _)| *n == name).unwrap().1;
        let expected: &[(&str, &[&str])] = &[
            (
                "LEVEL_COUNTS",
                &[
                    "SEARCH hopper_jobs USING COVERING INDEX hopper_jobs_ready \
                     (queue=? AND priority=? AND run_at<?)",
                    "SEARCH hopper_jobs USING COVERING INDEX hopper_jobs_ready \
                     (queue=? AND priority=? AND run_at>?)",
                ],
            ),
            (
                "BOUNDED_COUNTS",
                &[
                    "SCAN hopper_jobs USING INDEX hopper_jobs_lease_expiry",
                    "SEARCH hopper_jobs USING COVERING INDEX hopper_jobs_finished \
                     (queue=? AND state=?)",
                ],
            ),
        ];
        for (name, parts) in expected {
            let steps = steps(name);
            for part in *parts {
                assert!(
                    steps.iter().any(|s| s == part),
                    "{name}: no step `{part}` in {steps:?}"
                );
            }
            // Each count reads its subquery as it runs, up to the LIMIT, rather than
            // flattened into a count of the whole range.
            let counted = steps.iter().filter(|s| s.starts_with("CO-ROUTINE")).count();
            assert_eq!(counted, 2, "{name}: {steps:?}");
        }
        let exact = steps("COUNTS");
        for index in ["hopper_jobs_lease_expiry", "hopper_jobs_finished"] {
            assert!(
                exact.iter().any(|s| s.contains(index)),
                "COUNTS: no `{index}` in {exact:?}"
            );
        }
    }

    /// A job with a key looks its holder up by the key and the holder's id, and each step
    /// of the sweep of stale keys reads a range of the keys: neither walks the held keys,
    /// however many there are.
    #[test]
    fn unique_keys_are_read_by_key_and_holder_by_id() {
        let by_id = "SEARCH j USING INTEGER PRIMARY KEY (rowid=?) LEFT-JOIN";
        let expected: &[(&str, &[&str])] = &[
            (
                "UNIQUE_HOLDER",
                &["SEARCH u USING PRIMARY KEY (queue=? AND key=?)", by_id],
            ),
            (
                "UNIQUE_CHUNK",
                &["SEARCH u USING PRIMARY KEY ((queue,key)>(?,?))", by_id],
            ),
            (
                "DROP_UNIQUE_KEY",
                &["SEARCH hopper_unique USING PRIMARY KEY (queue=? AND key=?)"],
            ),
        ];
        let plans = plans();
        for (name, parts) in expected {
            let (_, steps) = plans.iter().find(|(n, _)| n == name).unwrap();
            assert_eq!(steps.len(), parts.len(), "{name}: {steps:?}");
            for part in *parts {
                assert!(
                    steps.iter().any(|s| s == part),
                    "{name}: no step `{part}` in {steps:?}"
                );
            }
        }
    }

    /// A job with an ordering key finds its key's pending and leased jobs, and an ended
    /// head (or one that stepped aside) the key's next job, by the key in the ordering index (one descent, however many
    /// jobs wait on the key or died of it); a job with a key ends by its id, as one
    /// without does.
    #[test]
    fn ordering_keys_are_read_by_key() {
        let by_key = "SEARCH hopper_jobs USING INDEX hopper_jobs_ordering \
                      (queue=? AND ordering_key=?)";
        let by_id = "SEARCH hopper_jobs USING INTEGER PRIMARY KEY (rowid=?)";
        // The next job: the first by id, else (subqueries 3 and 2) the first due.
        let next: &[&str] = &[
            by_id,
            "SCALAR SUBQUERY 1",
            by_key,
            "SCALAR SUBQUERY 3",
            by_key,
            "SCALAR SUBQUERY 2",
            by_key,
        ];
        let expected: &[(&str, &[&str])] = &[
            ("INSERT_ORDERED_JOB", &["SCALAR SUBQUERY 1", by_key]),
            ("UNBLOCK_NEXT", next),
            (
                "KEY_HAS_HEAD",
                &["SCAN CONSTANT ROW", "SCALAR SUBQUERY 1", by_key],
            ),
            (
                "STEP_ASIDE",
                &[
                    by_id,
                    "CORRELATED SCALAR SUBQUERY 1",
                    "SEARCH o USING INDEX hopper_jobs_ordering (queue=? AND ordering_key=?)",
                ],
            ),
            ("SETTLE_ACK_ORDERED", &[by_id]),
            ("SETTLE_DEAD_LETTER_ORDERED", &[by_id]),
            ("SETTLE_CANCEL_ORDERED", &[by_id]),
        ];
        let plans = plans();
        for (name, parts) in expected {
            let (_, steps) = plans.iter().find(|(n, _)| n == name).unwrap();
            assert_eq!(steps, parts, "{name}");
        }
    }

    /// A group is read and counted by its name, its dead members by the group in the order
    /// they died, and a counted member forgotten by its id: no statement of groups walks a
    /// table, however many groups or members there are.
    #[test]
    fn groups_are_read_by_name() {
        let names = [
            "GROUP_SEALED",
            "ADD_MEMBERS",
            "COUNT_MEMBERS",
            "FORGET_MEMBER",
            "SEAL_GROUP",
            "GROUP_COMPLETION",
            "SET_GROUP_COMPLETION",
            "GROUP_STATUS",
            "GROUP_DEAD_IDS",
        ];
        let plans = plans();
        for name in names {
            let (_, steps) = plans.iter().find(|(n, _)| *n == name).unwrap();
            assert!(
                steps.iter().all(|s| !s.starts_with("SCAN")),
                "{name}: {steps:?}"
            );
        }
        let (_, dead) = plans.iter().find(|(n, _)| *n == "GROUP_DEAD_IDS").unwrap();
        assert_eq!(
            dead,
            &["SEARCH hopper_group_dead USING INDEX hopper_group_dead_by_group (group_name=?)"]
        );
    }

    /// Each listing is bounded by its cursor in the index, to the id: a page deep in a
    /// million jobs reads a page's worth of entries, as the first does. The registry's
    /// reads and prunes read ranges too, so a report or a listing never walks stale rows.
    #[test]
    fn listings_queue_names_and_registry_read_ranges_of_an_index() {
        let expected: &[(&str, &[&str])] = &[
            (
                "LIST_WAITING",
                &[
                    "hopper_jobs_ready (queue=? AND priority=? AND run_at=? AND id>?)",
                    "hopper_jobs_ready (queue=? AND priority=? AND run_at>? AND run_at<?)",
                    "SEARCH j USING INTEGER PRIMARY KEY (rowid=?)",
                ],
            ),
            (
                "LIST_WAITING_NEWEST",
                &[
                    "hopper_jobs_ready (queue=? AND priority=? AND run_at=? AND id<?)",
                    "hopper_jobs_ready (queue=? AND priority=? AND run_at>? AND run_at<?)",
                ],
            ),
            (
                "LIST_LEASED",
                &[
                    "hopper_jobs_lease_expiry (lease_expires=? AND rowid>?)",
                    "hopper_jobs_lease_expiry (lease_expires>?)",
                ],
            ),
            (
                "LIST_LEASED_NEWEST",
                &[
                    "hopper_jobs_lease_expiry (lease_expires=? AND rowid<?)",
                    "hopper_jobs_lease_expiry (lease_expires<?)",
                ],
            ),
            (
                "LIST_FINISHED",
                &[
                    "hopper_jobs_finished (queue=? AND state=? AND finished_at=? AND id>?)",
                    "hopper_jobs_finished (queue=? AND state=? AND finished_at>?)",
                ],
            ),
            (
                "LIST_FINISHED_NEWEST",
                &[
                    "hopper_jobs_finished (queue=? AND state=? AND finished_at=? AND id<?)",
                    "hopper_jobs_finished (queue=? AND state=? AND finished_at<?)",
                ],
            ),
            (
                "LIVE_WORKERS",
                &["SEARCH hopper_workers USING INDEX hopper_workers_expiry (expires_at>?)"],
            ),
            (
                "PRUNE_WORKERS",
                &["SEARCH hopper_workers USING INDEX hopper_workers_expiry (expires_at<?)"],
            ),
            (
                "PRUNE_THROUGHPUT",
                &["SEARCH hopper_throughput USING INDEX hopper_throughput_age (bucket<?)"],
            ),
            (
                "THROUGHPUT",
                &["SEARCH hopper_throughput USING PRIMARY KEY (queue=? AND bucket>?)"],
            ),
            (
                "QUEUE_NAMES",
                &[
                    "hopper_jobs_ready (queue>?)",
                    "hopper_jobs_finished (queue>?)",
                    "SCAN hopper_jobs USING INDEX hopper_jobs_lease_expiry",
                ],
            ),
        ];
        let plans = plans();
        for (name, parts) in expected {
            let (_, steps) = plans.iter().find(|(n, _)| n == name).unwrap();
            for part in *parts {
                assert!(
                    steps.iter().any(|s| s.contains(part)),
                    "{name}: no step `{part}` in {steps:?}"
                );
            }
            // A listing's LIMIT keeps the first rows of its two ranges only while SQLite
            // runs them in turn, the first range before the second, as here; not merged.
            if name.starts_with("LIST_") {
                assert!(
                    steps.iter().any(|s| s == "COMPOUND QUERY")
                        && !steps.iter().any(|s| s.contains("MERGE")),
                    "{name}: {steps:?}"
                );
            }
        }
    }
}
