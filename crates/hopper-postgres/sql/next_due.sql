SELECT min(run_at) FROM {schema}.hopper_jobs
WHERE state = 0 AND queue = ANY($1::text[])
  AND run_at > coalesce($2::bigint, {schema}.hopper_now_ms())
