-- Adds what a worker settled to its queues' buckets of now: `{rows}` of
-- `throughput_row.sql`, one per queue in name order, so that two heartbeats lock shared
-- buckets in the same order. Rows that repeat a queue add to the same bucket.
INSERT INTO hopper_throughput (queue, bucket, completed, failed, dead)
VALUES {rows}
ON DUPLICATE KEY UPDATE
    completed = completed + VALUES(completed),
    failed = failed + VALUES(failed),
    dead = dead + VALUES(dead)
