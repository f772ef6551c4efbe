-- A queue's buckets that started within the last hour of the bucket running, oldest
-- first: one range of the primary key.
SELECT bucket, completed, failed, dead
FROM hopper_throughput
WHERE queue = ? AND bucket > FLOOR(COALESCE(?, {now}) / {bucket}) * {bucket} - 3600000
ORDER BY bucket
