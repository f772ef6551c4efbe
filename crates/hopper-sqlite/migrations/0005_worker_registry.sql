-- Live workers and recent throughput (`hopper_core::registry`).
--
-- `hopper_workers`: each running worker's latest report, replaced by the next, until it
-- expires (`expires_at`, the broker's time of the report plus its ttl) or the worker stops
-- and removes it. `queues` is the report's queues, a JSON array of
-- `hopper_core::QueueBeat`. Every report deletes the expired rows by their index.
CREATE TABLE hopper_workers (
    id           TEXT    PRIMARY KEY,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    queues       TEXT    NOT NULL
) STRICT;
CREATE INDEX hopper_workers_expiry ON hopper_workers (expires_at);

-- What the workers settled, per queue and 10-second bucket (`bucket`, its start); a
-- report adds its counts to the bucket of the broker's time. Kept for the last hour and
-- the bucket running: every report deletes older buckets by the index on `bucket`.
CREATE TABLE hopper_throughput (
    queue     TEXT    NOT NULL,
    bucket    INTEGER NOT NULL,
    completed INTEGER NOT NULL,
    failed    INTEGER NOT NULL,
    dead      INTEGER NOT NULL,
    PRIMARY KEY (queue, bucket)
) STRICT, WITHOUT ROWID;
CREATE INDEX hopper_throughput_age ON hopper_throughput (bucket);
