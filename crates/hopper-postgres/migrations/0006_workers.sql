-- Live workers and recent throughput (hopper_core::registry), written by each worker's
-- periodic report (heartbeat.sql). Names compare byte by byte, as the other tables' do.
--
-- A worker is listed until `expires_at`, which the broker sets from the report's ttl; a
-- worker that stops deletes its row, and one that dies is deleted by a later report of
-- any worker once its own has expired. `queues` is the JSON of what it says of each of
-- its queues.
CREATE TABLE {schema}.hopper_workers (
    id           text COLLATE "C" PRIMARY KEY,
    host         text   NOT NULL,
    pid          bigint NOT NULL,
    started_at   bigint NOT NULL,
    heartbeat_at bigint NOT NULL,
    expires_at   bigint NOT NULL,
    queues       jsonb  NOT NULL
);
CREATE INDEX hopper_workers_expires ON {schema}.hopper_workers (expires_at);

-- What was settled per queue, in buckets of 10 s starting at `bucket`: reports add to
-- the bucket running, and delete those older than an hour and a bucket.
CREATE TABLE {schema}.hopper_throughput (
    queue     text COLLATE "C" NOT NULL,
    bucket    bigint NOT NULL,
    completed bigint NOT NULL,
    failed    bigint NOT NULL,
    dead      bigint NOT NULL,
    PRIMARY KEY (queue, bucket)
);
CREATE INDEX hopper_throughput_bucket ON {schema}.hopper_throughput (bucket);
