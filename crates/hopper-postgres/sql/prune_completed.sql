DELETE FROM {schema}.hopper_jobs
WHERE state = 2 AND finished_at < coalesce($1::bigint, {schema}.hopper_now_ms()) - $2
