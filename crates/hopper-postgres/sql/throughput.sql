-- Queue $1's buckets that started within the hour before the bucket running at $2 (NULL:
-- the database clock), or in it, oldest first; $3 is the span of a bucket (ms). Read over
-- the primary key's range of the queue.
WITH now AS (SELECT coalesce($2::bigint, {schema}.hopper_now_ms()) AS ms)
SELECT t.bucket, t.completed, t.failed, t.dead
FROM now, {schema}.hopper_throughput AS t
WHERE t.queue = $1
  AND t.bucket > now.ms - ((now.ms % $3::bigint) + $3::bigint) % $3::bigint - 3600000
ORDER BY t.bucket
