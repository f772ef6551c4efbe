-- Live workers and what they settled, as their heartbeats report them
-- (`hopper_core::registry`).
--
-- A worker's row lasts until `expires_at`: its latest report replaces the last, a worker
-- that stops deletes its row, and rows of workers that died are deleted by the next
-- heartbeat of any worker. `queues` is the JSON array of the worker's queues as it reported
-- them, LONGTEXT for the reason `errors` is (a value another program wrote badly leaves the
-- worker listed). `id` compares byte for byte, as the core compares ids, so that ids that
-- differ in case are two workers and listings tie-break in the core's order.
--
-- `hopper_throughput` holds a queue's settled counts per 10-second bucket (`bucket` is the
-- bucket's start in ms), added to by every heartbeat that settled something; buckets older
-- than the last hour are deleted by heartbeats too. `queue` is the jobs table's column.
--
-- Both tables IF NOT EXISTS, their indexes inside them: a run cut short before its version
-- was recorded runs again harmlessly.
CREATE TABLE IF NOT EXISTS hopper_workers (
    id           VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    host         VARCHAR(200) NOT NULL,
    pid          BIGINT       NOT NULL,
    started_at   BIGINT       NOT NULL,
    heartbeat_at BIGINT       NOT NULL,
    expires_at   BIGINT       NOT NULL,
    queues       LONGTEXT     NOT NULL,
    PRIMARY KEY (id),
    -- The workers whose report expired, deleted, and those still listed.
    KEY hopper_workers_expires (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS hopper_throughput (
    queue     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    bucket    BIGINT       NOT NULL,
    completed BIGINT       NOT NULL,
    failed    BIGINT       NOT NULL,
    dead      BIGINT       NOT NULL,
    PRIMARY KEY (queue, bucket),
    -- The buckets past the last hour, deleted.
    KEY hopper_throughput_bucket (bucket)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
