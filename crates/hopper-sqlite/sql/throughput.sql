SELECT bucket, completed, failed, dead
FROM hopper_throughput
WHERE queue = ?1 AND bucket > ?2
ORDER BY bucket
