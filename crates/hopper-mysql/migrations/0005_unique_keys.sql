-- Unique keys (`hopper_core::job::UniqueScope`): which job holds each key of a queue.
--
-- A row names the job that last took the key, the scope it took it for (0 queued,
-- 1 unfinished, 2 for a period) and, for a period, when the hold ends (`until`, ms). Nothing
-- here is kept in step with the jobs: whether a hold still stands is decided when the next
-- job with the key is enqueued, from the holder's row of `hopper_jobs` (a missing row is a
-- holder gone), so claims and settlements never touch this table. Rows whose hold lapsed
-- are deleted a window at a time by heartbeats, as expired workers are.
--
-- `key` is VARBINARY: keys are compared byte for byte, trailing spaces included (the
-- binary collations of character columns ignore them), and 255 bytes is the longest key
-- (`MAX_UNIQUE_KEY`). `queue` is the jobs table's column. Enqueues lock their keys in the
-- primary key's order.
--
-- IF NOT EXISTS: a run cut short before its version was recorded runs again harmlessly.
CREATE TABLE IF NOT EXISTS hopper_unique (
    queue   VARCHAR(128)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    `key`   VARBINARY(255) NOT NULL,
    job_id  BIGINT         NOT NULL,
    scope   SMALLINT       NOT NULL,
    until   BIGINT         NULL,
    PRIMARY KEY (queue, `key`)
) ENGINE = InnoDB;
