UPDATE {schema}.hopper_jobs
SET state = 4, finished_at = coalesce($2::bigint, {schema}.hopper_now_ms())
WHERE id = $1 AND state = 0
RETURNING id
