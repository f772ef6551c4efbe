-- Hopper's job table and its indexes.
--
-- `state`: 0 pending, 1 leased, 2 completed, 3 dead, 4 cancelled. Queries name states as
-- literals, never as parameters, so that SQLite can use the partial indexes below.
-- Times are milliseconds since the Unix epoch. AUTOINCREMENT keeps ids of deleted (acked)
-- jobs from ever being handed out again.

CREATE TABLE hopper_jobs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT    NOT NULL,
    state         INTEGER NOT NULL DEFAULT 0,
    priority      INTEGER NOT NULL DEFAULT 0,
    run_at        INTEGER NOT NULL,
    attempt       INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL,
    payload       BLOB    NOT NULL,
    headers       TEXT,
    created_at    INTEGER NOT NULL,
    lease_id      INTEGER,
    lease_expires INTEGER,
    last_error    TEXT,
    finished_at   INTEGER
) STRICT;

-- Claims: the next pending jobs of a queue in fetch order.
CREATE INDEX hopper_jobs_ready ON hopper_jobs (queue, priority DESC, run_at, id) WHERE state = 0;

-- The earliest delayed job of a queue (`next_due`), and due/scheduled counts.
CREATE INDEX hopper_jobs_due ON hopper_jobs (queue, run_at) WHERE state = 0;

-- Expired leases, taken back at each fetch.
CREATE INDEX hopper_jobs_lease_expiry ON hopper_jobs (lease_expires) WHERE state = 1;

-- Renewal by lease id.
CREATE INDEX hopper_jobs_lease ON hopper_jobs (lease_id) WHERE state = 1;

-- Dead letters of a queue, oldest first.
CREATE INDEX hopper_jobs_dead ON hopper_jobs (queue, finished_at, id) WHERE state = 3;
