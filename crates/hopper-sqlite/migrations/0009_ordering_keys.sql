-- Ordering keys (`NewJob::ordering_key`, `hopper_core::job::ordering`): jobs of a queue
-- that share a key run one at a time, in enqueue order.
--
-- `ordering_key`: the key, NULL for a job enqueued without one and for every job stored
-- before this column. It stays on the row once the job ends, for its record and for a
-- re-drive of a dead letter, which joins its key again.
--
-- A job waiting behind an earlier one of its key is pending with its `run_at` moved
-- 2^62 ms (`hopper_core::job::BLOCKED`) into the future, past every time a claim looks at,
-- so that claims read the ready index as they always did. 0003's range for `run_at` holds
-- no such time, and SQLite changes a CHECK constraint only by rebuilding the table, as
-- 0003 did: the rows are copied as they are (all are in range, and no row has a key yet),
-- the AUTOINCREMENT sequence carried over, the indexes made again. The new range allows
-- the same times moved by 2^62, for a job with a key only.

CREATE TABLE hopper_jobs_ordered (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT    NOT NULL,
    state         INTEGER NOT NULL DEFAULT 0 CHECK (state BETWEEN 0 AND 4),
    priority      INTEGER NOT NULL DEFAULT 0
                  CHECK (priority BETWEEN -2147483648 AND 2147483647),
    run_at        INTEGER NOT NULL,
    attempt       INTEGER NOT NULL DEFAULT 0 CHECK (attempt BETWEEN 0 AND 2147483647),
    max_attempts  INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 2147483647),
    payload       BLOB    NOT NULL,
    headers       TEXT,
    created_at    INTEGER NOT NULL,
    lease_id      INTEGER,
    lease_expires INTEGER,
    last_error    TEXT,
    finished_at   INTEGER,
    errors        TEXT,
    unique_key    TEXT,
    ordering_key  TEXT,
    CHECK (run_at BETWEEN -62135596800000 AND 253402300799999
           OR ordering_key IS NOT NULL
              AND run_at BETWEEN 4611623882830587904 AND 4611939420728187903)
) STRICT;

INSERT INTO hopper_jobs_ordered
    (id, queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at,
     lease_id, lease_expires, last_error, finished_at, errors, unique_key)
SELECT id, queue, state, priority, run_at, attempt, max_attempts, payload, headers, created_at,
       lease_id, lease_expires, last_error, finished_at, errors, unique_key
FROM hopper_jobs;

DELETE FROM sqlite_sequence WHERE name = 'hopper_jobs_ordered';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'hopper_jobs_ordered', seq FROM sqlite_sequence WHERE name = 'hopper_jobs';

DROP TABLE hopper_jobs;
ALTER TABLE hopper_jobs_ordered RENAME TO hopper_jobs;

-- The indexes of 0003 and 0004.
CREATE INDEX hopper_jobs_ready ON hopper_jobs (queue, priority DESC, run_at, id) WHERE state = 0;
CREATE INDEX hopper_jobs_lease_expiry ON hopper_jobs (lease_expires) WHERE state = 1;
CREATE INDEX hopper_jobs_finished ON hopper_jobs (queue, state, finished_at, id) WHERE state >= 2;

-- The pending and leased jobs of a key, in enqueue order: whether a new job of the key
-- waits, and which job of the key goes next. Jobs without a key have no entry, and a
-- finished one leaves, so the index holds only the keys' unfinished jobs, however many
-- dead letters a key gathers. Its condition names `state`, so a claim or a settlement of
-- any job tests it, as it tests those of the three indexes above; a query names the
-- condition besides the key it wants.
CREATE INDEX hopper_jobs_ordering ON hopper_jobs (queue, ordering_key, id)
    WHERE ordering_key IS NOT NULL AND state <= 1;
