-- Rate limits (`hopper_core::rate`): at most `max` jobs of a queue start in any window of
-- `per_ms` milliseconds, whichever process claims them.
--
-- `hopper_rate_limits` holds one row per limited queue: the limit, and `starts`, the
-- window as `Window::to_bytes` writes it (12 bytes per (time, jobs) pair, oldest first).
-- A claim of a limited queue locks its row before it reads the queue's jobs, takes at most
-- the room the window leaves, and writes the window back in the same transaction (see
-- `queries::rate`); queues without a row are claimed as before. `queue` is the jobs'
-- queue column, ASCII and compared byte for byte. MEDIUMBLOB: a window keeps a pair per
-- claim within `per`, up to `MAX_RATE` pairs (1.2 MB) for a limit of 100,000 claimed one
-- at a time. The CHECKs are the ranges `RateLimit::new` accepts (1 to 100,000 starts, 1 ms
-- to 100 years); their names are their own, as MySQL checks names across a schema.
--
-- `started_at` is when a job's latest attempt was claimed, which a claim now stamps with
-- the lease (NULL for a job never claimed, and for the jobs claimed before this version):
-- the time a limited queue's window counts the start at. No index, no range check: an
-- ALTER that adds a nullable column at the end of the table is instant on MariaDB 10.3+
-- and MySQL 8.0.12+, where a CHECK would copy the table.
--
-- The table first, IF NOT EXISTS; the column in the last statement, so that a second run
-- that finds it there counts the migration as applied.
CREATE TABLE IF NOT EXISTS hopper_rate_limits (
    queue   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    `max`   INT          NOT NULL,
    per_ms  BIGINT       NOT NULL,
    starts  MEDIUMBLOB   NOT NULL,
    PRIMARY KEY (queue),
    CONSTRAINT hopper_rate_limits_max CHECK (`max` BETWEEN 1 AND 100000),
    CONSTRAINT hopper_rate_limits_per CHECK (per_ms BETWEEN 1 AND 3153600000000)
) ENGINE = InnoDB;

ALTER TABLE hopper_jobs
    ADD COLUMN started_at BIGINT NULL;
