//! Every statement the broker runs, one per file under `sql/`, so that SQL reads as SQL and
//! the tree matches the other SQL brokers'. All values are bound parameters; job states
//! appear as literals.
//!
//! Files hold placeholders in braces, expanded here into SQL, never into values:
//! - `{now}`: the database clock in milliseconds ([`DB_NOW_MS`]). A statement that needs
//!   "now" reads `COALESCE(?, {now})`, and the broker binds its own clock's reading or
//!   NULL; so each statement is written once for both clocks.
//! - `{error_history}`: how many errors a job's history keeps
//!   ([`ERROR_HISTORY`](hopper_core::admin::ERROR_HISTORY)).
//! - `{bucket}` and `{kept}`: the span of a throughput bucket and how far back buckets
//!   are kept, in milliseconds ([`BUCKET`] and [`KEPT`]).
//! - `{blocked}`: how far the `run_at` of a job waiting behind an earlier job of its
//!   ordering key is moved ([`BLOCKED`]); `{max_run_at}`: the latest time a job can be
//!   given ([`MAX_RUN_AT`]), past which a stored `run_at` is a waiting job's
//!   ([`is_blocked`](hopper_core::job::is_blocked)).
//! - `{ids}`: a list of `?`; `{pairs}`: a list of `(?, ?)`; `{triples}`: of `(?, ?, ?)`;
//!   `{rows}` and `{each}`: a fragment file repeated (`enqueue_row.sql`,
//!   `enqueue_keyed_row.sql`, `settle_row.sql`, `throughput_row.sql`, `unique_row.sql`,
//!   `next_due.sql`, `probe_queue.sql`).
//! - In listings, `{after}` and `{order}`: the comparison that keeps what comes after the
//!   cursor, and the sort direction, oldest or newest first ([`keyset`]); `{due}`: due or
//!   scheduled. Cursors are compared column by column (`a > ? OR (a = ? AND id > ?)`), which
//!   bounds an index range; MariaDB does not bound one by a row comparison.
//!
//! Lists are padded to a power of two with inert values (0 is never a job id nor a lease
//! id; a padding throughput row repeats the last queue and adds nothing; a padding key
//! repeats the last key, which its own row already holds), so a connection
//! prepares a handful of texts per statement and keeps them cached, rather than one per
//! batch size; the server's `max_prepared_stmt_count` stays far away.

use std::sync::LazyLock;

use hopper_core::admin::ERROR_HISTORY;
use hopper_core::job::{BLOCKED, MAX_RUN_AT};
use hopper_core::registry::{BUCKET, KEPT};

/// The database clock in milliseconds since the epoch. `NOW(3)` is fixed for the length of
/// a statement, so every row of one statement sees the same instant, and the optimiser
/// treats it as a constant (index ranges on `run_at` still apply). Sessions run in UTC
/// (see `url`), where `UNIX_TIMESTAMP` of a local time is exact.
pub(crate) const DB_NOW_MS: &str = "CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)";

/// The most items one list statement carries; longer inputs are split into several
/// statements of the same transaction. Keeps pairs (two placeholders each) well under the
/// protocol's 65,535 placeholders.
pub(crate) const MAX_LIST: usize = 4096;

/// The most rows one `settle_update.sql` carries (six placeholders each).
pub(crate) const MAX_SETTLE_ROWS: usize = 2048;

/// Drops comment lines and expands `{now}`, `{error_history}`, `{bucket}`, `{kept}`,
/// `{blocked}` and `{max_run_at}`: what the server receives.
fn render(file: &str) -> String {
    let mut out = String::with_capacity(file.len());
    for line in file.lines() {
        let line = line.trim_end();
        if line.trim_start().starts_with("--") || line.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(line);
    }
    out.replace("{now}", DB_NOW_MS)
        .replace("{error_history}", &ERROR_HISTORY.to_string())
        .replace("{bucket}", &BUCKET.as_millis().to_string())
        .replace("{kept}", &KEPT.as_millis().to_string())
        .replace("{blocked}", &BLOCKED.to_string())
        .replace("{max_run_at}", &MAX_RUN_AT.to_string())
}

macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident = $file:literal;)*) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: LazyLock<String> =
                LazyLock::new(|| render(include_str!(concat!("../sql/", $file))));
        )*

        /// Every statement with its name, for the tests.
        #[cfg(test)]
        pub(crate) fn all() -> Vec<(&'static str, &'static str)> {
            vec![$((stringify!($name), $name.as_str())),*]
        }
    };
}

statements! {
    /// Per session: READ COMMITTED.
    SESSION = "session.sql";
    /// Opens a transaction.
    BEGIN = "begin.sql";
    /// Commits it.
    COMMIT = "commit.sql";
    /// Abandons it.
    ROLLBACK = "rollback.sql";
    /// The step between the ids of one insert.
    ID_STEP = "id_step.sql";
    /// Creates the table of applied migrations if missing.
    MIGRATIONS_TABLE = "migrations_table.sql";
    /// The schema version: the highest migration applied.
    SCHEMA_VERSION = "schema_version.sql";
    /// Serialises `migrate` runs on one database across processes.
    MIGRATE_LOCK = "migrate_lock.sql";
    /// Releases that lock.
    MIGRATE_UNLOCK = "migrate_unlock.sql";
    /// Records one applied migration.
    RECORD_MIGRATION = "record_migration.sql";
    /// Adds jobs: `{rows}` of `ENQUEUE_ROW`.
    ENQUEUE = "enqueue.sql";
    /// One job's values.
    ENQUEUE_ROW = "enqueue_row.sql";
    /// Adds jobs with their unique and ordering keys: `{rows}` of `ENQUEUE_KEYED_ROW`.
    ENQUEUE_KEYED = "enqueue_keyed.sql";
    /// One job's values, moved behind its ordering key or not, then its keys.
    ENQUEUE_KEYED_ROW = "enqueue_keyed_row.sql";
    /// The database clock, once for a whole enqueue of jobs with unique keys.
    CLOCK = "clock.sql";
    /// Takes free unique keys and locks held ones: `{rows}` of `UNIQUE_ROW`.
    UNIQUE_TAKE = "unique_take.sql";
    /// One key's values.
    UNIQUE_ROW = "unique_row.sql";
    /// The named keys' holds, with their holders' state.
    UNIQUE_HOLDERS = "unique_holders.sql";
    /// Hands lapsed keys to new jobs: `{rows}` of `UNIQUE_ROW`.
    UNIQUE_MOVE = "unique_move.sql";
    /// Deletes new jobs whose key another job holds.
    UNIQUE_UNSTORE = "unique_unstore.sql";
    /// A window of holds after a cursor, with their holders' state, for pruning.
    UNIQUE_WINDOW = "unique_window.sql";
    /// Deletes lapsed holds still held by the jobs named.
    UNIQUE_EXPIRE = "unique_expire.sql";
    /// Locks the rows of ordering keys, making the missing ones.
    ORDERING_LOCK = "ordering_lock.sql";
    /// The first unfinished job of each of the named ordering keys.
    ORDERING_HEADS = "ordering_heads.sql";
    /// The job each of the named ordering keys lets run next.
    ORDERING_NEXT = "ordering_next.sql";
    /// Lets the named jobs, each its key's next, run.
    ORDERING_UNBLOCK = "ordering_unblock.sql";
    /// The named jobs stepping aside whose key has another unfinished job.
    ORDERING_ASIDE = "ordering_aside.sql";
    /// Moves the named jobs stepping aside behind their key.
    ORDERING_BLOCK = "ordering_block.sql";
    /// The dead letters with an ordering key among the named jobs.
    ORDERING_DEAD = "ordering_dead.sql";
    /// The dead letters with an ordering key among a queue's oldest.
    ORDERING_DEAD_QUEUE = "ordering_dead_queue.sql";
    /// Puts the named dead letters with an ordering key back, moved behind their key or not.
    ORDERING_REDRIVE = "ordering_redrive.sql";
    /// Cancels a pending job with an ordering key, locked first.
    ORDERING_CANCEL = "ordering_cancel.sql";
    /// A window of ordering keys after a cursor, each saying whether it has unfinished jobs.
    ORDERING_WINDOW = "ordering_window.sql";
    /// Deletes the rows of the named ordering keys that have no unfinished job.
    ORDERING_FORGET = "ordering_forget.sql";
    /// Locks the jobs of expired leases and reads what the reaper needs of them.
    REAP_EXPIRED = "reap_expired.sql";
    /// Returns the named jobs of expired leases to pending, or dead on their last attempt.
    REAP = "reap.sql";
    /// One budget's candidates, locked; several are joined by UNION ALL.
    CLAIM = "claim.sql";
    /// The same among the priority levels `{levels}` only, each a range of due jobs.
    CLAIM_LEVELS = "claim_levels.sql";
    /// The highest pending priority level of a queue below a bound.
    LEVEL_BELOW = "level_below.sql";
    /// The lowest above a bound.
    LEVEL_ABOVE = "level_above.sql";
    /// Dead-letters a locked candidate that cannot be read as a job, with the reason.
    BURY_PENDING = "bury_pending.sql";
    /// Takes claimed jobs under a lease, charging an attempt.
    LEASE_CLAIMED = "lease_claimed.sql";
    /// The earliest `run_at` after now among one queue's pending jobs.
    NEXT_DUE = "next_due.sql";
    /// The same over several queues: `{each}` is `NEXT_DUE` per queue.
    NEXT_DUE_ANY = "next_due_any.sql";
    /// Whether a claim would find anything: `{each}` is `PROBE_QUEUE` per queue.
    PROBE = "probe.sql";
    /// The earliest `run_at` among one queue's pending jobs.
    PROBE_QUEUE = "probe_queue.sql";
    /// Locks the named jobs and reads their state, lease and ordering key, to tell which
    /// settlements apply and which keys move on.
    SETTLE_LOCK = "settle_lock.sql";
    /// Removes acknowledged jobs still held under the named lease.
    SETTLE_ACK = "settle_ack.sql";
    /// Applies every other outcome to jobs still held under the named lease: `{rows}` of
    /// `SETTLE_ROW`.
    SETTLE_UPDATE = "settle_update.sql";
    /// One settlement's values.
    SETTLE_ROW = "settle_row.sql";
    /// Extends the leases that have not expired.
    RENEW = "renew.sql";
    /// Which of the named leases still hold a job and have not expired.
    LIVE_LEASES = "live_leases.sql";
    /// Cancels a job without an ordering key if it is still pending.
    CANCEL = "cancel.sql";
    /// A job's state and lease, and whether it has an ordering key.
    JOB_LEASE = "job_lease.sql";
    /// A job's state, lease, `run_at` and ordering key, locked.
    JOB_LOCK = "job_lock.sql";
    /// One job's full record.
    JOB_RECORD = "job_record.sql";
    /// A queue's jobs by state.
    COUNTS = "counts.sql";
    /// The same, each state's count stopped at a limit.
    COUNTS_BOUNDED = "counts_bounded.sql";
    /// A queue's dead letters, oldest first.
    DEAD_LETTERS = "dead_letters.sql";
    /// Removes a queue's jobs that are not members of a group not counted yet.
    PURGE = "purge.sql";
    /// A queue's members not counted yet, locked, with their groups.
    PURGE_MEMBERS = "purge_members.sql";
    /// Removes the named jobs: a purge's members.
    PURGE_IDS = "purge_ids.sql";
    /// Locks a group's row, making it if it is new.
    GROUP_LOCK = "group_lock.sql";
    /// Whether a group whose row is locked is sealed.
    GROUP_SEALED = "group_sealed.sql";
    /// Counts new members of a group.
    GROUP_ADD_MEMBERS = "group_add_members.sql";
    /// Counts settled members of a group, locking its row.
    GROUP_COUNT = "group_count.sql";
    /// Whether a group's completion job is due.
    GROUP_DUE = "group_due.sql";
    /// Records a member that died.
    GROUP_ADD_DEAD = "group_add_dead.sql";
    /// Takes the named counted members out of their groups.
    GROUP_FORGET = "group_forget.sql";
    /// Seals a group with its completion job.
    GROUP_SEAL = "group_seal.sql";
    /// A group's counts and completion job, to enqueue it.
    GROUP_COMPLETION = "group_completion.sql";
    /// Records the id of a group's completion job, unless it has one.
    GROUP_FIRED = "group_fired.sql";
    /// A group's counts, seal and completion job's id.
    GROUP_STATUS = "group_status.sql";
    /// The ids of a group's members that died, in order.
    GROUP_DEAD_IDS = "group_dead_ids.sql";
    /// A page of one priority level's waiting jobs (pending or scheduled) after a cursor.
    LIST_LEVEL = "list_level.sql";
    /// A page of a queue's leased jobs after a cursor.
    LIST_LEASED = "list_leased.sql";
    /// A page of a queue's jobs in one finished state after a cursor.
    LIST_FINISHED = "list_finished.sql";
    /// Puts the named dead letters without an ordering key back in their queues.
    RETRY_DEAD = "retry_dead.sql";
    /// Puts a queue's oldest dead letters without an ordering key back.
    RETRY_DEAD_QUEUE = "retry_dead_queue.sql";
    /// Deletes the named dead letters.
    DISCARD_DEAD = "discard_dead.sql";
    /// Deletes a queue's oldest dead letters.
    DISCARD_DEAD_QUEUE = "discard_dead_queue.sql";
    /// Pauses a queue.
    PAUSE = "pause.sql";
    /// Resumes it.
    RESUME = "resume.sql";
    /// The queues holding jobs, paused or rate-limited.
    QUEUE_NAMES = "queue_names.sql";
    /// Whether a queue is paused, its oldest due job, the clock, and its rate limit.
    QUEUE_STATE = "queue_state.sql";
    /// Locks the limit rows of the named queues and reads their windows and the clock.
    RATE_LOCK = "rate_lock.sql";
    /// Writes a limited queue's window back.
    RATE_WRITE = "rate_write.sql";
    /// Sets a queue's rate limit, keeping its window.
    RATE_SET = "rate_set.sql";
    /// Lifts it.
    RATE_LIFT = "rate_lift.sql";
    /// A later read of a claim limited per key: ids and rate keys only (`{priority}`).
    CLAIM_KEYS = "claim_keys.sql";
    /// The rows it takes, by id (`{ids}`).
    CLAIM_BY_IDS = "claim_by_ids.sql";
    /// Marks a queue's limit as one per key.
    RATE_PER_KEY_SET = "rate_per_key_set.sql";
    /// Marks it as one for the whole queue, or lifted.
    RATE_PER_KEY_LIFT = "rate_per_key_lift.sql";
    /// Forgets a queue's key windows.
    RATE_KEYS_DROP = "rate_keys_drop.sql";
    /// Reads the windows of some keys of a queue: `{ids}` of keys.
    RATE_KEYS_READ = "rate_keys_read.sql";
    /// Writes key windows back: `{rows}` of `RATE_KEYS_ROW`.
    RATE_KEYS_SAVE = "rate_keys_save.sql";
    /// One key's window.
    RATE_KEYS_ROW = "rate_keys_row.sql";
    /// Drops idle windows of a queue: `{ids}` of keys.
    RATE_KEYS_FORGET = "rate_keys_forget.sql";
    /// Drops a queue's idle windows, once a period.
    RATE_KEYS_SWEEP = "rate_keys_sweep.sql";
    /// Notes that sweep.
    RATE_KEYS_SWEPT = "rate_keys_swept.sql";
    /// Moves held-back jobs to when their keys have room: `{rows}` of `RATE_DEFER_ROW`.
    RATE_DEFER = "rate_defer.sql";
    /// One job moved and its new time.
    RATE_DEFER_ROW = "rate_defer_row.sql";
    /// The newest job id: what the wake poller watches.
    MAX_ID = "max_id.sql";
    /// Lists a worker, or replaces its last report with this one.
    WORKER_BEAT = "worker_beat.sql";
    /// Adds settled counts to buckets: `{rows}` of `THROUGHPUT_ROW`.
    THROUGHPUT_ADD = "throughput_add.sql";
    /// One queue's counts, in the bucket of now.
    THROUGHPUT_ROW = "throughput_row.sql";
    /// Forgets the workers whose report expired.
    WORKERS_EXPIRE = "workers_expire.sql";
    /// Forgets the buckets no longer kept.
    THROUGHPUT_EXPIRE = "throughput_expire.sql";
    /// Forgets one worker.
    WORKER_REMOVE = "worker_remove.sql";
    /// The workers whose report has not expired, oldest first.
    WORKERS_LIVE = "workers_live.sql";
    /// A queue's buckets of the last hour, oldest first.
    THROUGHPUT_BUCKETS = "throughput_buckets.sql";
}

/// A fixed statement, as sqlx takes it.
pub(crate) fn fixed(statement: &'static LazyLock<String>) -> &'static str {
    statement.as_str()
}

/// How many items a list of `n` is padded to.
pub(crate) fn padded(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// How many tuples a list of `n` is padded to, for the `{pairs}` and `{triples}` of a
/// `WHERE` (acks, `hopper_unique`, `hopper_ordering`): as [`padded`], but two at least. MariaDB reads a list of one tuple as a
/// row equality, which in a `DELETE` bounds no range of the primary key: the statement
/// would read the whole table.
pub(crate) fn padded_tuples(n: usize) -> usize {
    padded(n).max(2)
}

/// `template` with `marker` replaced by `n` copies of `item` joined by `separator`.
fn repeat(template: &str, marker: &str, item: &str, n: usize, separator: &str) -> String {
    let mut list = String::with_capacity(n * (item.len() + separator.len()));
    for i in 0..n {
        if i > 0 {
            list.push_str(separator);
        }
        list.push_str(item);
    }
    template.replace(marker, &list)
}

/// `template` with `{ids}` replaced by `n` placeholders.
pub(crate) fn with_ids(template: &str, n: usize) -> String {
    repeat(template, "{ids}", "?", n, ", ")
}

/// `template` with `{pairs}` replaced by `n` `(?, ?)`.
pub(crate) fn with_pairs(template: &str, n: usize) -> String {
    repeat(template, "{pairs}", "(?, ?)", n, ", ")
}

/// `template` with `{triples}` replaced by `n` `(?, ?, ?)`.
pub(crate) fn with_triples(template: &str, n: usize) -> String {
    repeat(template, "{triples}", "(?, ?, ?)", n, ", ")
}

/// The insert of `n` jobs.
pub(crate) fn enqueue(n: usize) -> String {
    repeat(&ENQUEUE, "{rows}", &ENQUEUE_ROW, n, ", ")
}

/// The insert of `n` jobs of an enqueue in which some job has a unique key.
pub(crate) fn enqueue_keyed(n: usize) -> String {
    repeat(&ENQUEUE_KEYED, "{rows}", &ENQUEUE_KEYED_ROW, n, ", ")
}

/// `template` (`UNIQUE_TAKE` or `UNIQUE_MOVE`) for `n` keys.
pub(crate) fn unique_rows(template: &str, n: usize) -> String {
    repeat(template, "{rows}", &UNIQUE_ROW, n, ", ")
}

/// The write of `n` key windows.
pub(crate) fn rate_keys_save(n: usize) -> String {
    repeat(&RATE_KEYS_SAVE, "{rows}", &RATE_KEYS_ROW, n, ", ")
}

/// The move of `n` held-back jobs.
pub(crate) fn rate_defer(n: usize) -> String {
    repeat(&RATE_DEFER, "{rows}", &RATE_DEFER_ROW, n, " UNION ALL ")
}

/// The addition of `n` queues' counts to their buckets.
pub(crate) fn throughput_add(n: usize) -> String {
    repeat(&THROUGHPUT_ADD, "{rows}", &THROUGHPUT_ROW, n, ", ")
}

/// The non-ack settlement of `n` rows.
pub(crate) fn settle_update(n: usize) -> String {
    repeat(&SETTLE_UPDATE, "{rows}", &SETTLE_ROW, n, " UNION ALL ")
}

/// One budget's claim: by levels (`levels` placeholders) or, for `None`, over the queue.
pub(crate) fn claim_one(levels: Option<usize>) -> String {
    match levels {
        None => CLAIM.clone(),
        Some(n) => repeat(&CLAIM_LEVELS, "{levels}", "?", n, ", "),
    }
}

/// A later read of a claim limited per key: over the queue, or its `levels` placeholders.
pub(crate) fn claim_keys(levels: Option<usize>) -> String {
    let priority = match levels {
        None => String::new(),
        Some(n) => format!("AND priority IN ({})", vec!["?"; n].join(", ")),
    };
    CLAIM_KEYS.replace("{priority}", &priority)
}

/// `template` with the listing placeholders `{after}` and `{order}` expanded for oldest or
/// newest first.
pub(crate) fn keyset(template: &str, newest_first: bool) -> String {
    let (after, order) = if newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    template.replace("{after}", after).replace("{order}", order)
}

/// The page of one priority level's due (`due`) or scheduled waiting jobs.
pub(crate) fn list_level(newest_first: bool, due: bool) -> String {
    keyset(&LIST_LEVEL, newest_first).replace("{due}", if due { "<=" } else { ">" })
}

/// `template` with `{each}` replaced by the one-queue read `each` for `n` queues: the read
/// itself for one, else `n` copies, each parenthesised, joined by UNION ALL.
fn each_queue(template: &str, each: &str, n: usize) -> String {
    if n == 1 {
        return template.replace("{each}", each);
    }
    repeat(template, "{each}", &format!("({each})"), n, " UNION ALL ")
}

/// The next due time over `n` queues (one queue's read needs no `MIN` around it).
pub(crate) fn next_due(n: usize) -> String {
    if n == 1 {
        return NEXT_DUE.clone();
    }
    each_queue(&NEXT_DUE_ANY, &NEXT_DUE, n)
}

/// The probe of `n` queues.
pub(crate) fn probe(n: usize) -> String {
    each_queue(&PROBE, &PROBE_QUEUE, n)
}

#[cfg(test)]
mod tests {
    use super::{
        COUNTS, COUNTS_BOUNDED, LIST_FINISHED, LIST_LEASED, UNIQUE_MOVE, UNIQUE_TAKE, all,
        claim_keys, claim_one, enqueue, enqueue_keyed, keyset, list_level, padded, probe,
        rate_defer, rate_keys_save, settle_update, throughput_add, unique_rows, with_ids,
        with_pairs, with_triples,
    };

    #[test]
    fn every_file_renders_without_comments_or_unexpanded_now() {
        for (name, text) in all() {
            assert!(!text.is_empty(), "{name} is empty");
            assert!(!text.contains("--"), "{name} kept a comment: {text}");
            assert!(!text.contains("{now}"), "{name}: {text}");
            assert!(!text.contains("{error_history}"), "{name}: {text}");
            assert!(!text.contains("{blocked}"), "{name}: {text}");
            assert!(!text.contains("{max_run_at}"), "{name}: {text}");
            assert!(
                !text.contains("{bucket}") && !text.contains("{kept}"),
                "{name}"
            );
        }
    }

    #[test]
    fn lists_expand_to_the_padded_size() {
        assert_eq!(
            [padded(0), padded(1), padded(3), padded(50), padded(64)],
            [1, 1, 4, 64, 64]
        );
        let sql = with_ids("x IN ({ids})", 3);
        assert_eq!(sql.as_str(), "x IN (?, ?, ?)");
        let sql = with_pairs("(a, b) IN ({pairs})", 2);
        assert_eq!(sql.as_str(), "(a, b) IN ((?, ?), (?, ?))");
        assert_eq!(enqueue(3).as_str().matches('?').count(), 24);
        let keyed = enqueue_keyed(3);
        assert_eq!(keyed.matches('?').count(), 39, "{keyed}");
        assert!(
            keyed.contains("created_at,\n     unique_key, ordering_key, group_name, rate_key)"),
            "{keyed}"
        );
        assert!(
            keyed.contains(" + ?) + ?, 0, ?, ?, ?, COALESCE(?, "),
            "{keyed}"
        );
        let sql = with_triples("x IN ({triples})", 2);
        assert_eq!(sql.as_str(), "x IN ((?, ?, ?), (?, ?, ?))");
        for template in [&UNIQUE_TAKE, &UNIQUE_MOVE] {
            let keys = unique_rows(template, 2);
            assert!(
                keys.contains("VALUES (?, ?, ?, ?, ?), (?, ?, ?, ?, ?)\n"),
                "{keys}"
            );
            assert_eq!(keys.matches('?').count(), 10, "{keys}");
        }
        assert_eq!(settle_update(2).as_str().matches("UNION ALL").count(), 1);
        let add = throughput_add(2);
        assert_eq!(add.matches('?').count(), 10);
        assert!(add.contains("FLOOR(COALESCE(?, CAST(") && add.contains("/ 10000) * 10000"));
        // The queue (is it limited?), the queue, the clock, the queue again (is it
        // paused?), the limit.
        assert_eq!(claim_one(None).matches('?').count(), 5);
        assert_eq!(rate_keys_save(3).matches('?').count(), 15);
        assert_eq!(claim_keys(None).matches('?').count(), 4);
        let keys_by_levels = claim_keys(Some(2));
        assert!(
            keys_by_levels.contains("queue = ? AND priority IN (?, ?) AND run_at"),
            "{keys_by_levels}"
        );
        let defer = rate_defer(2);
        assert_eq!(defer.matches("UNION ALL").count(), 1, "{defer}");
        assert_eq!(defer.matches('?').count(), 4, "{defer}");
        // One queue's read (the queue twice), then the reaper's flag and the clock twice.
        assert_eq!(probe(1).matches('?').count(), 5);
        assert!(
            probe(1).contains("FROM (SELECT MIN(run_at)"),
            "{}",
            probe(1)
        );
        assert_eq!(probe(3).matches("UNION ALL").count(), 2);
        assert_eq!(probe(3).matches('?').count(), 9);
        let by_levels = claim_one(Some(4));
        assert!(
            by_levels.contains("priority IN (?, ?, ?, ?)"),
            "{by_levels}"
        );
        assert_eq!(by_levels.matches('?').count(), 9);
    }

    #[test]
    fn listings_expand_to_their_direction() {
        let scheduled_newest = list_level(true, false);
        assert!(
            scheduled_newest.contains("run_at > COALESCE(?")
                && scheduled_newest.contains("(run_at < ? OR (run_at = ? AND id < ?))")
                && scheduled_newest.contains("ORDER BY run_at DESC, id DESC"),
            "{scheduled_newest}"
        );
        let due_oldest = list_level(false, true);
        assert!(
            due_oldest.contains("run_at <= COALESCE(?")
                && due_oldest.contains("ORDER BY run_at ASC, id ASC"),
            "{due_oldest}"
        );
        for text in [
            due_oldest,
            keyset(&LIST_LEASED, false),
            keyset(&LIST_FINISHED, true),
        ] {
            assert!(!text.contains('{'), "{text}");
        }
    }

    /// The predicates of each count, in order: the bounded counts count what the exact do.
    fn count_predicates(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|line| line.split_once(" WHERE ").map(|(_, p)| p))
            .map(|p| match p.split_once(" LIMIT ?") {
                Some((p, _)) => p,
                None => p
                    .strip_suffix(',')
                    .unwrap_or(p)
                    .strip_suffix(')')
                    .unwrap_or(p),
            })
            .collect()
    }

    #[test]
    fn bounded_counts_count_what_the_exact_counts_do() {
        let exact = count_predicates(&COUNTS);
        assert_eq!(exact.len(), 4, "{}", *COUNTS);
        assert_eq!(count_predicates(&COUNTS_BOUNDED), exact);
        assert_eq!(COUNTS_BOUNDED.matches("LIMIT ?").count(), 4);
        assert_eq!(
            COUNTS_BOUNDED.matches('?').count(),
            COUNTS.matches('?').count() + 4
        );
    }
}
