-- The ranges Hopper gives every job, enforced by the table itself, so that a row written by
-- another program cannot hold what a worker could not read (SQLite's INTEGER holds any
-- 64-bit number, where a job's priority and attempts are 32-bit): `state` 0 to 4, priority
-- a 32-bit integer, attempts from 0 and at least one allowed, run times from the year 1 to
-- the end of 9999 (the same as `hopper_core::job`'s limits).
--
-- SQLite adds CHECK constraints only by rebuilding the table. A row already out of range
-- is copied as a dead letter naming the column and its value, with the value brought
-- into range, so that it can be listed, retried or discarded. The AUTOINCREMENT sequence
-- is carried over: ids of deleted jobs are never handed out again.

CREATE TABLE hopper_jobs_checked (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT    NOT NULL,
    state         INTEGER NOT NULL DEFAULT 0 CHECK (state BETWEEN 0 AND 4),
    priority      INTEGER NOT NULL DEFAULT 0
                  CHECK (priority BETWEEN -2147483648 AND 2147483647),
    run_at        INTEGER NOT NULL
                  CHECK (run_at BETWEEN -62135596800000 AND 253402300799999),
    attempt       INTEGER NOT NULL DEFAULT 0 CHECK (attempt BETWEEN 0 AND 2147483647),
    max_attempts  INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 2147483647),
    payload       BLOB    NOT NULL,
    headers       TEXT,
    created_at    INTEGER NOT NULL,
    lease_id      INTEGER,
    lease_expires INTEGER,
    last_error    TEXT,
    finished_at   INTEGER
) STRICT;

INSERT INTO hopper_jobs_checked
    (id, queue, state, priority, run_at, attempt, max_attempts, payload, headers,
     created_at, lease_id, lease_expires, last_error, finished_at)
SELECT id, queue,
       CASE WHEN why IS NULL THEN state ELSE 3 END,
       max(-2147483648, min(2147483647, priority)),
       max(-62135596800000, min(253402300799999, run_at)),
       max(0, min(2147483647, attempt)),
       max(1, min(2147483647, max_attempts)),
       payload, headers, created_at,
       CASE WHEN why IS NULL THEN lease_id END,
       CASE WHEN why IS NULL THEN lease_expires END,
       CASE WHEN why IS NULL THEN last_error
            ELSE 'the row cannot be read as a job: column ' || why || ' out of range' END,
       CASE WHEN why IS NULL THEN finished_at
            ELSE CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) END
FROM (
    SELECT *,
           CASE WHEN state NOT BETWEEN 0 AND 4 THEN 'state: ' || state
                WHEN priority NOT BETWEEN -2147483648 AND 2147483647
                    THEN 'priority: ' || priority
                WHEN run_at NOT BETWEEN -62135596800000 AND 253402300799999
                    THEN 'run_at: ' || run_at
                WHEN attempt NOT BETWEEN 0 AND 2147483647 THEN 'attempt: ' || attempt
                WHEN max_attempts NOT BETWEEN 1 AND 2147483647
                    THEN 'max_attempts: ' || max_attempts
           END AS why
    FROM hopper_jobs
);

DELETE FROM sqlite_sequence WHERE name = 'hopper_jobs_checked';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'hopper_jobs_checked', seq FROM sqlite_sequence WHERE name = 'hopper_jobs';

DROP TABLE hopper_jobs;
ALTER TABLE hopper_jobs_checked RENAME TO hopper_jobs;

-- The indexes of 0001, less the two 0002 dropped.
CREATE INDEX hopper_jobs_ready ON hopper_jobs (queue, priority DESC, run_at, id) WHERE state = 0;
CREATE INDEX hopper_jobs_lease_expiry ON hopper_jobs (lease_expires) WHERE state = 1;
CREATE INDEX hopper_jobs_dead ON hopper_jobs (queue, finished_at, id) WHERE state = 3;
