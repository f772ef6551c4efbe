-- Adds settled counts to a queue's bucket, creating it.
INSERT INTO hopper_throughput (queue, bucket, completed, failed, dead)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (queue, bucket) DO UPDATE
SET completed = completed + excluded.completed, failed = failed + excluded.failed,
    dead = dead + excluded.dead
