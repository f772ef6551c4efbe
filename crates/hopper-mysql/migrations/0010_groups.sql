-- Groups (`NewJob::group`, `hopper_core::group`): members counted as they settle, and a
-- completion job enqueued once the group is sealed and every member has settled.
--
-- `hopper_groups` holds one row per group heard of: its counts, whether it is sealed, the
-- completion job it was sealed with (`completion_*`, kept for the record once enqueued)
-- and, once enqueued, that job's id. `completion_run`: 0 now, 1 after `completion_run_ms`
-- milliseconds, 2 at `completion_run_ms`, each reckoned when the job is enqueued. Names are
-- VARBINARY, as ordering keys are: a group's name is up to 255 bytes of any UTF-8 but NUL
-- (`MAX_GROUP`), compared byte for byte. Every transaction that counts members, adds them
-- or seals the group locks its row first (several in name order), so they take turns, and
-- the one that leaves a sealed group with nothing unsettled enqueues the completion job
-- before it commits, only while `completion_id` is NULL: once, whichever broker it is.
--
-- `hopper_group_dead`: the members that died, in the order they did (`seq`, taken under
-- the group's row lock), for `GroupStatus::dead`.
--
-- `hopper_jobs.group_name`: the group of a member not counted yet; NULL for every other
-- job (one of no group, one stored before this version, and a member once counted, so
-- that a dead member re-driven is not counted again). A nullable column added last, so
-- that a second run that finds it counts the migration as applied; both servers add it
-- in place, without copying the table.
CREATE TABLE IF NOT EXISTS hopper_groups (
    name                    VARBINARY(255) NOT NULL,
    members                 BIGINT         NOT NULL DEFAULT 0,
    succeeded               BIGINT         NOT NULL DEFAULT 0,
    dead                    BIGINT         NOT NULL DEFAULT 0,
    cancelled               BIGINT         NOT NULL DEFAULT 0,
    sealed                  TINYINT        NOT NULL DEFAULT 0,
    completion_queue        VARCHAR(128)   CHARACTER SET ascii COLLATE ascii_bin NULL,
    completion_payload      LONGBLOB       NULL,
    completion_priority     INT            NULL,
    completion_run          TINYINT        NULL,
    completion_run_ms       BIGINT         NULL,
    completion_max_attempts INT            NULL,
    completion_headers      MEDIUMTEXT     NULL,
    completion_ordering_key VARBINARY(255) NULL,
    completion_id           BIGINT         NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS hopper_group_dead (
    seq        BIGINT         NOT NULL AUTO_INCREMENT,
    group_name VARBINARY(255) NOT NULL,
    job_id     BIGINT         NOT NULL,
    PRIMARY KEY (seq),
    KEY hopper_group_dead_by_group (group_name, seq)
) ENGINE = InnoDB;

ALTER TABLE hopper_jobs ADD COLUMN group_name VARBINARY(255) NULL;
