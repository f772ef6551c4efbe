-- Ordering keys (`hopper_core::job::ordering`): jobs of a queue sharing a key run one at a
-- time, in enqueue order.
--
-- `ordering_key` is the key a job was enqueued with, NULL for every job without one and
-- for the jobs stored before this version. VARBINARY, as `hopper_unique`'s keys are: keys
-- compare byte for byte, case and trailing spaces included, and 255 bytes is the longest
-- (`MAX_ORDERING_KEY`).
--
-- `hopper_jobs_ordering` finds a key's unfinished jobs (`finished_at` NULL) in id order in
-- one dive: the first of them is the one a new job of the key waits behind, or the one to
-- unblock when the key's running job ends. It leaves out `state` and `run_at`, which claims
-- and retries change, so that the only writes plain jobs make to it are their insert and
-- their delete (and their end, for the few that die or are cancelled): MySQL has no partial
-- indexes, and every plain job has an entry, in the key's NULL section.
--
-- A job waiting behind an earlier job of its key is stored with its `run_at` moved 2^62 ms
-- ahead (`ordering::BLOCKED`), past every claim. The range check of version 2 becomes two
-- ranges: the times Hopper gives a job, and the same moved by 2^62. Changing a CHECK
-- constraint rebuilds the table on both servers (an ALTER that copies it, as version 2
-- did); DROP CONSTRAINT needs MySQL 8.0.19 or MariaDB 10.2. The new constraint has a name
-- of its own: MySQL checks the names of check constraints across a schema.
--
-- `hopper_ordering` holds one row per key, which enqueues, re-drives and the transactions
-- that end a job of the key lock (in key order) before they look at the key's jobs, so
-- that they take turns and ids within a key follow commit order. The rows hold nothing
-- else; heartbeats delete those of keys without unfinished jobs, a window at a time.
--
-- The table first, IF NOT EXISTS; the column, the index and the constraints in the last
-- statement, so that a second run that finds the column there counts the migration as
-- applied.
CREATE TABLE IF NOT EXISTS hopper_ordering (
    queue   VARCHAR(128)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    `key`   VARBINARY(255) NOT NULL,
    PRIMARY KEY (queue, `key`)
) ENGINE = InnoDB;

ALTER TABLE hopper_jobs
    ADD COLUMN ordering_key VARBINARY(255) NULL,
    ADD KEY hopper_jobs_ordering (queue, ordering_key, finished_at),
    DROP CONSTRAINT hopper_jobs_run_at,
    ADD CONSTRAINT hopper_jobs_run_at_or_blocked
        CHECK (run_at BETWEEN -62135596800000 AND 253402300799999
               OR run_at BETWEEN 4611686018427387904 - 62135596800000
                             AND 4611686018427387904 + 253402300799999);
