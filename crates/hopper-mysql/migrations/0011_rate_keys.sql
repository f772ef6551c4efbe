-- Rate limits per key (`hopper_core::RateLimit::per_key`, `NewJob::rate_key`): a window
-- for each rate key of a limited queue's jobs instead of one for the queue.
--
-- A queue limited per key has, beside its row of `hopper_rate_limits`, a row of
-- `hopper_rate_per_key` holding when its claims last dropped its idle key windows. A
-- table of its own rather than a column of `hopper_rate_limits`: a migration may change
-- one table in its last statement only (see `migrate`), and the jobs' column goes there.
-- A claim locks it with the limit's row (`rate_lock.sql`); setting and lifting a limit
-- write both in one transaction.
--
-- `hopper_rate_keys` holds one window per key seen within a period: `starts` as
-- `Window::to_bytes` writes it, the time of its latest start, and the latest time the
-- last claim gave a job of the key that its full window held back (`Window::defer`). The
-- claims that hold the queue's row read and write it; they drop rows with no start within
-- a period and no time given ahead, at most once a period per queue. Keys are VARBINARY,
-- compared byte for byte, 255 bytes at most (`MAX_ORDERING_KEY`).
--
-- `rate_key` is a job's key, NULL for a job without one (its starts count in the window of
-- the empty key) and for the jobs stored before this version: a nullable column at the
-- end of the table, added in place on MariaDB 10.3+ and MySQL 8.0.12+.
--
-- The tables first, IF NOT EXISTS; the column in the last statement, so that a second run
-- that finds it there counts the migration as applied.
CREATE TABLE IF NOT EXISTS hopper_rate_per_key (
    queue     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    swept_at  BIGINT       NOT NULL,
    PRIMARY KEY (queue)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS hopper_rate_keys (
    queue       VARCHAR(128)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    rate_key    VARBINARY(255) NOT NULL,
    starts      MEDIUMBLOB     NOT NULL,
    last_start  BIGINT         NULL,
    booked_at   BIGINT         NULL,
    PRIMARY KEY (queue, rate_key)
) ENGINE = InnoDB;

ALTER TABLE hopper_jobs
    ADD COLUMN rate_key VARBINARY(255) NULL;
