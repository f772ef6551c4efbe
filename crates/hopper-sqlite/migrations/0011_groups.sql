-- Groups (`NewJob::group`, `hopper_core::group`): members counted as they settle, and a
-- completion job enqueued once the group is sealed and every member has settled.
--
-- `group_name`: the group of a member not counted yet. NULL for every other job: one
-- enqueued without a group, one stored before this column, and a member once it has been
-- counted (completed, dead, cancelled), so that a dead member re-driven is not counted
-- again. A nullable column with no default is added in place, without rewriting a row.
ALTER TABLE hopper_jobs ADD COLUMN group_name TEXT;

-- One row per group heard of: its counts, whether it is sealed, the completion job it was
-- sealed with (`completion_*`, kept until it is enqueued, then kept for the record) and,
-- once enqueued, that job's id. `completion_run`: 0 now, 1 after `completion_run_ms`
-- milliseconds, 2 at `completion_run_ms`, each reckoned when the job is enqueued. Every
-- count changes inside the write transaction of the call that settles the member, and
-- the completion job is enqueued by the transaction that leaves a sealed group with
-- nothing unsettled, only while `completion_id` is NULL: SQLite runs one write
-- transaction at a time on the file, so across brokers and processes it happens once.
CREATE TABLE hopper_groups (
    name                    TEXT    PRIMARY KEY,
    members                 INTEGER NOT NULL DEFAULT 0 CHECK (members >= 0),
    succeeded               INTEGER NOT NULL DEFAULT 0 CHECK (succeeded >= 0),
    dead                    INTEGER NOT NULL DEFAULT 0 CHECK (dead >= 0),
    cancelled               INTEGER NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
    sealed                  INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1)),
    completion_queue        TEXT,
    completion_payload      BLOB,
    completion_priority     INTEGER,
    completion_run          INTEGER CHECK (completion_run IN (0, 1, 2)),
    completion_run_ms       INTEGER,
    completion_max_attempts INTEGER,
    completion_headers      TEXT,
    completion_ordering_key TEXT,
    completion_id           INTEGER
) STRICT;

-- The members that died, in the order they did (`seq`): `GroupStatus::dead`. A dead
-- member is a row here rather than an entry appended to a list in its group's row, so
-- that a death costs one insert however many died before it.
CREATE TABLE hopper_group_dead (
    seq        INTEGER PRIMARY KEY,
    group_name TEXT    NOT NULL,
    job_id     INTEGER NOT NULL
) STRICT;
CREATE INDEX hopper_group_dead_by_group ON hopper_group_dead (group_name, seq);
