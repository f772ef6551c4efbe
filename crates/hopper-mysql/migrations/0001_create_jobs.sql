-- Hopper's job table and its indexes.
--
-- `state`: 0 pending, 1 leased, 2 completed, 3 dead, 4 cancelled. Times are milliseconds
-- since the Unix epoch, read from the database clock unless the broker was given a clock of
-- its own (tests). IF NOT EXISTS because MySQL commits DDL at once: a migration cut short
-- after this statement but before its version was recorded runs again harmlessly.
--
-- `queue` is ASCII with a binary collation: names are compared byte for byte (`Q` and `q`
-- are two queues) and the index keys stay short. Errors and headers are MEDIUMTEXT so that
-- a long error message is kept rather than refused by strict mode.

CREATE TABLE IF NOT EXISTS hopper_jobs (
    id            BIGINT       NOT NULL AUTO_INCREMENT,
    queue         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state         TINYINT      NOT NULL DEFAULT 0,
    priority      INT          NOT NULL DEFAULT 0,
    run_at        BIGINT       NOT NULL,
    attempt       INT          NOT NULL DEFAULT 0,
    max_attempts  INT          NOT NULL,
    payload       LONGBLOB     NOT NULL,
    headers       MEDIUMTEXT   NULL,
    created_at    BIGINT       NOT NULL,
    lease_id      BIGINT       NULL,
    lease_expires BIGINT       NULL,
    last_error    MEDIUMTEXT   NULL,
    finished_at   BIGINT       NULL,
    PRIMARY KEY (id),
    -- Claims walk this in fetch order (no sort) and stop at their LIMIT. MariaDB before
    -- 10.8 ignores DESC here and sorts instead.
    KEY hopper_jobs_ready (state, queue, priority DESC, run_at, id),
    -- The earliest delayed job of a queue (`next_due`) in one index dive, and the
    -- due/scheduled split of `counts`.
    KEY hopper_jobs_due (state, queue, run_at),
    -- Expired leases, returned to their queues by the fetch that notices them.
    KEY hopper_jobs_lease_expires (state, lease_expires),
    -- Renewal and settlement by lease id.
    KEY hopper_jobs_lease (lease_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
